//! `footprint`: the real binary as an operator runs it — stripped size, time from spawn to a
//! healthy `/healthz`, idle RSS, and peak RSS (VmHWM) over a `publish` run against it.

use crate::report::{Report, Target as Goal};
use crate::target::Target;
use crate::{Bench, publish};
use anyhow::{Context, bail};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

const MIB: f64 = 1024.0 * 1024.0;

/// `target/<profile>/webhookd` beside this harness (`target/<profile>/examples/bench`), first
/// (re)built with `cargo build [--release] --bin webhookd …` so the figures are of the current
/// source. Under `cargo test` (which holds the build lock, and has just built the binary for
/// the integration tests) it is used as it is, or skipped when absent. `WEBHOOKD_BENCH_BINARY`
/// names another build to run instead, as it is (`scripts/bench-pg.sh`'s A/B of two binaries).
pub fn binary() -> anyhow::Result<Option<PathBuf>> {
    if let Some(path) = std::env::var_os("WEBHOOKD_BENCH_BINARY") {
        let path = PathBuf::from(path);
        if !path.exists() {
            bail!("WEBHOOKD_BENCH_BINARY: no file at {}", path.display());
        }
        return Ok(Some(path));
    }
    let exe = std::env::current_exe()?;
    let profile_dir = exe
        .parent()
        .and_then(|examples| examples.parent())
        .context("cannot find the target folder from this harness's path")?;
    let binary = profile_dir.join("webhookd");
    if cfg!(test) {
        return Ok(binary.exists().then_some(binary));
    }
    let target_dir = profile_dir
        .parent()
        .context("cannot find the target folder")?;
    let mut cargo = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    // `--example bench` too: the same feature set as the harness's own build, so the two
    // builds do not keep rebuilding each other's dependencies in a shared target folder.
    cargo
        .args([
            "build",
            "--bin",
            "webhookd",
            "--example",
            "bench",
            "--manifest-path",
        ])
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"))
        .env("CARGO_TARGET_DIR", target_dir);
    if profile_dir.file_name().is_some_and(|n| n == "release") {
        cargo.arg("--release");
    }
    let status = cargo.status().context("cannot run cargo")?;
    if !status.success() {
        bail!("cargo build --bin webhookd failed");
    }
    Ok(Some(binary))
}

/// A `/proc/PID/status` field in bytes (`VmRSS`, `VmHWM`).
pub fn proc_status_bytes(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status
        .lines()
        .find(|l| l.starts_with(&format!("{field}:")))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The size of the binary after `strip` (when installed; else as built — the release
/// profile already strips symbols).
fn stripped_size(binary: &std::path::Path) -> anyhow::Result<u64> {
    let dir = tempfile::tempdir()?;
    let copy = dir.path().join("webhookd");
    let stripped = Command::new("strip")
        .arg("-o")
        .arg(&copy)
        .arg(binary)
        .status()
        .is_ok_and(|s| s.success());
    let path = if stripped { copy.as_path() } else { binary };
    Ok(std::fs::metadata(path)?.len())
}

pub fn scenario(bench: &mut Bench) -> anyhow::Result<()> {
    let mut r = Report::new("footprint");
    let Some(binary) = binary()? else {
        r.note("skipped: no webhookd binary beside the harness");
        bench.emit(r);
        return Ok(());
    };
    let profile = binary
        .parent()
        .and_then(|p| p.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    r.param("binary", binary.display().to_string())
        .param("profile", profile);
    let size = stripped_size(&binary)?;
    r.add_target(
        "stripped_binary_mb",
        size as f64 / 1e6,
        "MB",
        Goal::AtMost(15.0),
    );
    bench.progress(&format!("footprint: starting {}", binary.display()));
    let (target, startup) = Target::spawn(&binary)?;
    r.add_target(
        "start_to_healthy_ms",
        startup.as_secs_f64() * 1000.0,
        "ms",
        Goal::AtMost(150.0),
    );
    let pid = target.pid().context("no pid")?;
    std::thread::sleep(if bench.settings.quick {
        Duration::from_millis(200)
    } else {
        Duration::from_secs(2)
    });
    let idle = proc_status_bytes(pid, "VmRSS").context("cannot read VmRSS")?;
    r.add_target("idle_rss_mib", idle as f64 / MIB, "MiB", Goal::AtMost(20.0));
    let publish = publish::measure(bench, &target, 1, 0)?;
    let peak = proc_status_bytes(pid, "VmHWM").context("cannot read VmHWM")?;
    r.add("peak_rss_publish_mib", peak as f64 / MIB, "MiB");
    for (key, unit) in [
        ("delivered_per_s", "del/s"),
        ("deliveries_expected", ""),
        ("deliveries_received", ""),
    ] {
        if let Some(v) = publish.get(key) {
            r.add(&format!("publish_{key}"), v, unit);
        }
    }
    for note in publish.notes {
        r.note(format!("publish: {note}"));
    }
    target.stop();
    bench.emit(r);
    Ok(())
}
