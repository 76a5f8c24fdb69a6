//! `footprint`: the real binary as an operator runs it — stripped size, time from spawn to a
//! healthy `/healthz`, idle RSS, and peak RSS (VmHWM) over a `publish` run against it, with
//! VmRSS sampled through the run (is it flat after warm-up?). `--events` sets the run's
//! length: 60,000 events are about 30 s at full speed on two cores.

use crate::report::{Report, Target as Goal};
use crate::target::Target;
use crate::{Bench, publish};
use anyhow::{Context, bail};
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

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

/// How often [`RssSampler`] reads the server's resident set.
const SAMPLE_EVERY: Duration = Duration::from_millis(250);

/// Reads `VmRSS` of a process every `every` on a thread of its own, until stopped: whether
/// the resident set stays flat after warm-up, which the peak (`VmHWM`) alone cannot tell.
struct RssSampler {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Vec<(f64, u64)>>,
}

impl RssSampler {
    fn start(pid: u32, every: Duration) -> RssSampler {
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::spawn(move || {
            let started = Instant::now();
            let mut samples = Vec::new();
            while !stopping.load(Ordering::Relaxed) {
                if let Some(rss) = proc_status_bytes(pid, "VmRSS") {
                    samples.push((started.elapsed().as_secs_f64(), rss));
                }
                std::thread::sleep(every);
            }
            samples
        });
        RssSampler { stop, thread }
    }

    /// (seconds since the start, VmRSS bytes) of each sample.
    fn stop(self) -> Vec<(f64, u64)> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

/// The resident set over the run: the highest sample of the first third (warm-up) and of the
/// rest, their difference (growth after warm-up: ~0 when flat), the last sample, and a
/// timeline of about ten points in a note.
fn rss_figures(r: &mut Report, samples: &[(f64, u64)]) {
    let Some(&(end, last)) = samples.last() else {
        r.note("no VmRSS sample was read");
        return;
    };
    let max_of = |from: f64, to: f64| {
        samples
            .iter()
            .filter(|(t, _)| *t >= from && *t <= to)
            .map(|(_, rss)| *rss)
            .max()
            .unwrap_or(0)
    };
    let warm = max_of(0.0, end / 3.0);
    let after = max_of(end / 3.0, end);
    r.add("rss_samples", samples.len() as f64, "")
        .add("rss_warmup_max_mib", warm as f64 / MIB, "MiB")
        .add("rss_after_warmup_max_mib", after as f64 / MIB, "MiB")
        .add(
            "rss_growth_after_warmup_mib",
            (after as f64 - warm as f64) / MIB,
            "MiB",
        )
        .add("rss_last_mib", last as f64 / MIB, "MiB");
    let step = samples.len().div_ceil(10).max(1);
    let timeline: Vec<String> = samples
        .iter()
        .step_by(step)
        .chain(std::iter::once(&(end, last)))
        .map(|(t, rss)| format!("{t:.0}s {:.1}", *rss as f64 / MIB))
        .collect();
    r.note(format!("VmRSS MiB over the run: {}", timeline.join(", ")));
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
    let sampler = RssSampler::start(pid, SAMPLE_EVERY);
    let publish = publish::measure(bench, &target, 1, 0)?;
    let samples = sampler.stop();
    let peak = proc_status_bytes(pid, "VmHWM").context("cannot read VmHWM")?;
    r.add_target(
        "peak_rss_publish_mib",
        peak as f64 / MIB,
        "MiB",
        Goal::AtMost(32.0),
    );
    rss_figures(&mut r, &samples);
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
