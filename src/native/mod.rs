//! Blocking native driver.
