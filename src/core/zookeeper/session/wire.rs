//! The requests the session carries and their replies, as values: each
//! request knows its op code and how to become a frame (with the chroot in
//! front of its path); a reply is decoded by the op of the request it
//! answers, which the reply does not repeat (design 1.5).

use crate::core::zookeeper::jute::{encode_frame, JuteError, Reader, Writer};
use crate::core::zookeeper::records::{
    op, Acl, Create2Response, CreateRequest, DeleteRequest, GetChildren2Response, GetDataResponse,
    PathWatchRequest, Record, RequestHeader, SetDataRequest, Stat, StatResponse,
};

/// One request of the lock recipes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ZkRequest {
    /// `create2` (op 15): the reply carries the node's `Stat` (its czxid
    /// is a lock's fencing token).
    Create {
        path: String,
        data: Vec<u8>,
        acl: Vec<Acl>,
        mode: i32,
    },
    /// `createContainer` (op 19), empty data: a recipe's parent directory.
    CreateContainer { path: String, acl: Vec<Acl> },
    /// `delete` (version -1: any).
    Delete { path: String, version: i32 },
    /// `exists`, optionally leaving a watch.
    Exists { path: String, watch: bool },
    /// `getData`, optionally leaving a watch (none is left on `NONODE`).
    GetData { path: String, watch: bool },
    /// `getChildren2` (op 12): the children, unordered, and the parent's stat.
    GetChildren { path: String, watch: bool },
    /// `setData` (version -1: any): a leader's proclaim.
    SetData {
        path: String,
        data: Vec<u8>,
        version: i32,
    },
    /// `closeSession` (op -11): the server deletes the ephemerals at once.
    CloseSession,
}

/// A successful reply, by the kind of request it answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ZkReply {
    /// `create2` / `createContainer`: the created path (chroot stripped).
    Created { path: String, stat: Stat },
    /// `delete`, `closeSession`: nothing more than success.
    Done,
    /// `exists`.
    Stat(Stat),
    /// `getData`.
    Data { data: Vec<u8>, stat: Stat },
    /// `getChildren2`.
    Children { children: Vec<String>, stat: Stat },
}

impl ZkRequest {
    /// The op code in the request header.
    pub(crate) fn op(&self) -> i32 {
        match self {
            ZkRequest::Create { .. } => op::CREATE2,
            ZkRequest::CreateContainer { .. } => op::CREATE_CONTAINER,
            ZkRequest::Delete { .. } => op::DELETE,
            ZkRequest::Exists { .. } => op::EXISTS,
            ZkRequest::GetData { .. } => op::GET_DATA,
            ZkRequest::GetChildren { .. } => op::GET_CHILDREN2,
            ZkRequest::SetData { .. } => op::SET_DATA,
            ZkRequest::CloseSession => op::CLOSE_SESSION,
        }
    }

    /// The whole frame: length, header with `xid`, record, every path
    /// under `chroot`.
    pub(crate) fn frame(&self, xid: i32, chroot: Option<&str>) -> Result<Vec<u8>, JuteError> {
        let mut w = Writer::new();
        RequestHeader { xid, op: self.op() }.encode(&mut w);
        let at = |path: &str| with_chroot(chroot, path);
        match self {
            ZkRequest::Create {
                path,
                data,
                acl,
                mode,
            } => create(&mut w, at(path), data.clone(), acl, *mode),
            ZkRequest::CreateContainer { path, acl } => {
                let mode = crate::core::zookeeper::records::create_mode::CONTAINER;
                create(&mut w, at(path), Vec::new(), acl, mode)
            }
            ZkRequest::Delete { path, version } => DeleteRequest {
                path: at(path),
                version: *version,
            }
            .encode(&mut w),
            ZkRequest::Exists { path, watch }
            | ZkRequest::GetData { path, watch }
            | ZkRequest::GetChildren { path, watch } => PathWatchRequest {
                path: at(path),
                watch: *watch,
            }
            .encode(&mut w),
            ZkRequest::SetData {
                path,
                data,
                version,
            } => SetDataRequest {
                path: at(path),
                data: data.clone(),
                version: *version,
            }
            .encode(&mut w),
            ZkRequest::CloseSession => {}
        }
        Ok(encode_frame(&w.finish()?))
    }
}

fn create(w: &mut Writer, path: String, data: Vec<u8>, acl: &[Acl], flags: i32) {
    CreateRequest {
        path,
        data,
        acl: acl.to_vec(),
        flags,
    }
    .encode(w)
}

/// Decodes the body of a successful reply to a request of op `op`.
pub(crate) fn decode_reply(
    op_code: i32,
    r: &mut Reader<'_>,
    chroot: Option<&str>,
) -> Result<ZkReply, JuteError> {
    Ok(match op_code {
        op::CREATE2 | op::CREATE_CONTAINER => {
            let c = Create2Response::decode(r)?;
            ZkReply::Created {
                path: strip_chroot(chroot, &c.path),
                stat: c.stat,
            }
        }
        op::EXISTS | op::SET_DATA => ZkReply::Stat(StatResponse::decode(r)?.stat),
        op::GET_DATA => {
            let d = GetDataResponse::decode(r)?;
            ZkReply::Data {
                data: d.data,
                stat: d.stat,
            }
        }
        op::GET_CHILDREN2 => {
            let c = GetChildren2Response::decode(r)?;
            ZkReply::Children {
                children: c.children,
                stat: c.stat,
            }
        }
        _ => ZkReply::Done,
    })
}

/// `path` as the server sees it (`ClientCnxn.prependChroot`).
pub(crate) fn with_chroot(chroot: Option<&str>, path: &str) -> String {
    match chroot {
        None => path.to_string(),
        Some(root) if path == "/" => root.to_string(),
        Some(root) => format!("{root}{path}"),
    }
}

/// A server path as the client sees it (`ClientCnxn.stripChroot`).
pub(crate) fn strip_chroot(chroot: Option<&str>, path: &str) -> String {
    let Some(root) = chroot else {
        return path.to_string();
    };
    match path.strip_prefix(root) {
        Some("") => "/".to_string(),
        Some(rest) if rest.starts_with('/') => rest.to_string(),
        _ => path.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::{strip_chroot, with_chroot, ZkRequest};

    #[test]
    fn chroot_is_added_and_stripped_as_the_java_client_does() {
        assert_eq!(with_chroot(Some("/c"), "/"), "/c");
        assert_eq!(with_chroot(Some("/c"), "/a"), "/c/a");
        assert_eq!(with_chroot(None, "/a"), "/a");
        assert_eq!(strip_chroot(Some("/c"), "/c"), "/");
        assert_eq!(strip_chroot(Some("/c"), "/c/a"), "/a");
        assert_eq!(strip_chroot(Some("/c"), "/cd/a"), "/cd/a");
    }

    #[test]
    fn a_delete_frame_is_its_header_and_record() {
        let req = ZkRequest::Delete {
            path: "/a".into(),
            version: -1,
        };
        let frame = req.frame(7, Some("/r")).unwrap();
        let mut want = vec![0, 0, 0, 20, 0, 0, 0, 7, 0, 0, 0, 2, 0, 0, 0, 4];
        want.extend_from_slice(b"/r/a");
        want.extend_from_slice(&[0xff; 4]);
        assert_eq!(frame, want);
    }
}
