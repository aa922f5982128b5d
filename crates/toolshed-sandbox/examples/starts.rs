//! Starts in one long-lived supervisor (as a server's dispatcher runs them): `N` pairs of
//! a run of a command through `Sandbox::run` and a plain spawn of it, taking turns, with
//! their medians and the median of the per-pair ratios.
//! Used by `bench/sandbox.sh`. Environment: `STARTS_AHEAD=N` sets
//! `SandboxConfig::started_ahead` (default 1); `STARTS_GAP_MS=MS` pauses after each
//! pair; `STARTS_SPLIT=1` also prints the runs served by a sandbox started ahead apart
//! from those that started their own.
//!
//! `cargo run --release -p toolshed-sandbox --example starts -- [N] PROGRAM [ARGS…]`

use std::process::ExitCode;
use std::time::Instant;

use toolshed_sandbox::{RunSpec, Sandbox, SandboxConfig};

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v.get(i).copied().unwrap_or(f64::NAN)
}

fn main() -> ExitCode {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let runs: usize = match args.first().and_then(|a| a.parse().ok()) {
        Some(n) => {
            args.remove(0);
            n
        }
        None => 200,
    };
    if args.is_empty() {
        eprintln!("usage: starts [N] PROGRAM [ARGS…]");
        return ExitCode::from(2);
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    runtime.block_on(async {
        let mut config = SandboxConfig::default();
        if let Some(n) = std::env::var("STARTS_AHEAD").ok().and_then(|v| v.parse().ok()) {
            config.started_ahead = n;
        }
        let sandbox = match Sandbox::new(config) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("{e} [{}]", e.code());
                return ExitCode::from(1);
            }
        };
        // Sandboxed and plain runs take turns (A B A B …), as farm-bench pairs them, so
        // a machine whose speed drifts over seconds moves both alike; the figure is the
        // median of the per-pair ratios. The first ten pairs are warm-up.
        let mut sandboxed = Vec::with_capacity(runs);
        let mut plain = Vec::with_capacity(runs);
        let mut ratios = Vec::with_capacity(runs);
        // STARTS_GAP_MS: a pause after each pair, as a server sees calls come and go.
        let gap = std::env::var("STARTS_GAP_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .map(std::time::Duration::from_millis);
        let mut hits = Vec::new();
        let mut misses = Vec::new();
        for i in 0..runs + 10 {
            let served = sandbox.runs_started_ahead();
            let t = Instant::now();
            match sandbox
                .run(RunSpec::new(&args[0], &args[1..]), Vec::new())
                .await
            {
                Ok(o) if o.success() => {}
                Ok(o) => {
                    eprintln!(
                        "the command failed: {:?} {}",
                        o.exit,
                        String::from_utf8_lossy(&o.stderr)
                    );
                    return ExitCode::from(1);
                }
                Err(e) => {
                    eprintln!("{e} [{}]", e.code());
                    return ExitCode::from(1);
                }
            }
            let s = t.elapsed().as_secs_f64() * 1000.0;
            if sandbox.runs_started_ahead() > served {
                hits.push(s);
            } else {
                misses.push(s);
            }
            let t = Instant::now();
            let status = std::process::Command::new(&args[0])
                .args(&args[1..])
                .stdout(std::process::Stdio::null())
                .status();
            if !status.is_ok_and(|s| s.success()) {
                eprintln!("the command failed unsandboxed");
                return ExitCode::from(1);
            }
            let p = t.elapsed().as_secs_f64() * 1000.0;
            if let Some(gap) = gap {
                tokio::time::sleep(gap).await;
            }
            if i >= 10 {
                sandboxed.push(s);
                plain.push(p);
                ratios.push(s / p);
            }
        }
        let (s50, s90) = (percentile(&mut sandboxed, 0.5), percentile(&mut sandboxed, 0.9));
        let (p50, p90) = (percentile(&mut plain, 0.5), percentile(&mut plain, 0.9));
        let ratio = percentile(&mut ratios, 0.5);
        println!(
            "{runs} pairs of {}: sandboxed p50 {s50:.2} ms (p90 {s90:.2}), plain spawn p50 {p50:.2} ms (p90 {p90:.2}), median pair ratio {ratio:.2}; {} of {} sandboxed runs in a sandbox started ahead",
            args.join(" "),
            sandbox.runs_started_ahead(),
            runs + 10,
        );
        if std::env::var_os("STARTS_SPLIT").is_some() {
            println!(
                "  started ahead: {} runs, p50 {:.2} ms; started for the run: {} runs, p50 {:.2} ms",
                hits.len(),
                percentile(&mut hits, 0.5),
                misses.len(),
                percentile(&mut misses, 0.5)
            );
        }
        ExitCode::SUCCESS
    })
}
