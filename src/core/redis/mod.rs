//! Redis over HTTP (Upstash REST, Webdis): single-node lock and Redlock.
