//! Build script: records the git commit and the target triple for `webhookd --version` (and
//! `build_info`). The commit comes from `WEBHOOKD_COMMIT` when set (a packager building from a
//! tarball), else from git, else it is `unknown`.

use std::path::PathBuf;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!text.is_empty()).then_some(text)
}

fn main() {
    let target = std::env::var("TARGET").unwrap_or_else(|_| "unknown".into());
    println!("cargo:rustc-env=WEBHOOKD_TARGET={target}");
    println!("cargo:rerun-if-env-changed=WEBHOOKD_COMMIT");
    println!("cargo:rerun-if-changed=build.rs");

    let from_env = std::env::var("WEBHOOKD_COMMIT")
        .ok()
        .map(|c| c.trim().to_string())
        .filter(|c| !c.is_empty());
    let commit = from_env
        .clone()
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=WEBHOOKD_COMMIT={commit}");

    // Rebuild when HEAD moves: HEAD itself (a checkout), the branch it points to (a commit),
    // and packed-refs. Only files that exist are named: cargo reruns on every build otherwise.
    if from_env.is_none() {
        let mut watched = vec!["HEAD".to_string(), "packed-refs".to_string()];
        if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
            watched.push(branch);
        }
        for name in watched {
            let path = git(&["rev-parse", "--path-format=absolute", "--git-path", &name]);
            if let Some(path) = path.map(PathBuf::from).filter(|p| p.exists()) {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
}
