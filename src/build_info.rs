//! What this binary is: version, git commit and target triple (recorded by `build.rs`).

/// The crate version (semver).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The git commit built (12 hex digits), or `unknown` when built outside a git checkout
/// without `WEBHOOKD_COMMIT` set.
pub const COMMIT: &str = env!("WEBHOOKD_COMMIT");
/// The target triple built for, e.g. `aarch64-unknown-linux-musl`.
pub const TARGET: &str = env!("WEBHOOKD_TARGET");
/// What `webhookd --version` prints after the name: `<semver> (<commit>, <target>)`.
pub const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("WEBHOOKD_COMMIT"),
    ", ",
    env!("WEBHOOKD_TARGET"),
    ")"
);
