//! etcd lock recipe over the JSON gateway.
