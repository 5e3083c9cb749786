//! Helpers shared by the integration tests: loading databases into temporary directories and
//! opening sessions on them.

#![allow(dead_code)]

use std::path::Path;

use thor_client::{PolicyConfig, Session, SessionConfig};
use thor_oo7::Params;
use thor_oo7::experiment::{Endpoint, connect, open_embedded};
use thor_oo7::load::{LoadOptions, LoadReport, load_dir};

/// Loads `params` into `dir`.
pub fn load(dir: &Path, params: &Params, opts: LoadOptions) -> LoadReport {
    load_dir(dir, params, opts, |_, _| {}).unwrap()
}

/// The embedded server of the database in `dir`.
pub fn endpoint(dir: &Path) -> Endpoint {
    Endpoint::Embedded(open_embedded(dir).unwrap())
}

/// A session with a big FPC cache.
pub fn session(e: &Endpoint) -> Session {
    connect(
        e,
        SessionConfig {
            cache_bytes: 64 << 20,
            policy: PolicyConfig::Fpc,
            background_replacement: true,
            ..SessionConfig::default()
        },
    )
    .unwrap()
}
