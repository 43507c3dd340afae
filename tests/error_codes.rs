//! The stable error codes exist once, in `edgelock::core::error::ERROR_CODES`;
//! the npm package's TypeScript union and its JavaScript wrapper must not
//! drift from it.

use std::collections::BTreeSet;

use edgelock::core::error::ERROR_CODES;

fn read(path: &str) -> String {
    std::fs::read_to_string(format!("{}/{path}", env!("CARGO_MANIFEST_DIR"))).expect(path)
}

#[test]
fn the_typescript_union_lists_exactly_the_core_codes() {
    let types = read("pkg-src/index.d.ts");
    let start = types
        .find("export type LockErrorCode =")
        .expect("LockErrorCode in index.d.ts");
    let union = &types[start..start + types[start..].find(';').expect("end of the union")];
    let listed: BTreeSet<&str> = union.split('"').skip(1).step_by(2).collect();
    let core: BTreeSet<&str> = ERROR_CODES.iter().copied().collect();
    assert_eq!(
        listed, core,
        "pkg-src/index.d.ts LockErrorCode differs from ERROR_CODES"
    );
}

#[test]
fn the_javascript_wrapper_takes_its_codes_from_the_core() {
    let api = read("pkg-src/api.mjs");
    assert!(
        api.contains("new Set(RawLocks.errorCodes())"),
        "api.mjs must build CODES from RawLocks.errorCodes()"
    );
    // Every code the wrapper names itself must be one of the core's.
    for (i, _) in api.match_indices("new LockError(\"") {
        let code = api[i + 15..].split('"').next().unwrap_or_default();
        assert!(
            ERROR_CODES.contains(&code),
            "api.mjs uses unknown code {code:?}"
        );
    }
}
