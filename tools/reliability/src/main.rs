//! `reliability [--short] [--only 1,4] [--variants 1h,3k] [--etcd-only] [--out RELIABILITY.md]`
//! runs the reliability scenarios against real local backends (`--etcd-only`:
//! only their etcd variants; `--variants`: only these variants of the
//! scenarios that honour it (1, 3, 4, 5, 8, 9, 10 and 11), the others'
//! scenarios skipped) and writes the report;
//! exits 1 if any scenario failed. `reliability worker '<json>'` is the
//! client process the scenarios start (and pause).

use std::time::Instant;

use edgelock_reliability::report::{render, ScenarioReport};
use edgelock_reliability::scenarios::s10_load::memory_main;
use edgelock_reliability::scenarios::{self, Mode};
use edgelock_reliability::worker::worker_main;

const USAGE: &str = "usage: reliability [--short] [--only ID[,ID...]] [--variants VARIANT[,VARIANT...]] [--etcd-only] [--out FILE]\n       reliability worker '<WorkerSpec JSON>'\n       reliability memory '<MemorySpec JSON>'";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("worker") {
        std::process::exit(worker_main(args.get(1).map(String::as_str).unwrap_or("")));
    }
    if args.first().map(String::as_str) == Some("memory") {
        std::process::exit(memory_main(args.get(1).map(String::as_str).unwrap_or("")));
    }
    let mut short = false;
    let mut etcd_only = false;
    let mut only: Option<Vec<String>> = None;
    let mut out: Option<String> = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--short" => short = true,
            "--etcd-only" => etcd_only = true,
            "--only" => {
                only = it
                    .next()
                    .map(|s| s.split(',').map(|x| x.trim().to_string()).collect())
            }
            "--variants" => {
                let ids: Vec<String> = it
                    .next()
                    .map(|s| s.split(',').map(|x| x.trim().to_string()).collect())
                    .unwrap_or_default();
                scenarios::choose_variants(ids);
            }
            "--out" => out = it.next().cloned(),
            "-h" | "--help" => {
                println!("{USAGE}");
                return;
            }
            other => {
                eprintln!("reliability: unknown argument {other:?}\n{USAGE}");
                std::process::exit(64);
            }
        }
    }
    let mode = Mode { short, etcd_only };
    let started = Instant::now();
    let mut reports: Vec<ScenarioReport> = Vec::new();
    for s in scenarios::all() {
        let chosen = match &only {
            Some(ids) => ids.iter().any(|i| i == s.id),
            None => !short || s.in_short,
        };
        // `--variants 3k`: only the scenarios those variants belong to
        // (a variant id is its scenario's id and a letter, or the bare id
        // of a scenario's first variant, as 11).
        let chosen = chosen
            && (!scenarios::variants_chosen()
                || scenarios::wants(s.id)
                || ('a'..='z').any(|l| scenarios::wants(&format!("{}{l}", s.id))));
        if !chosen || (etcd_only && !s.etcd) {
            continue;
        }
        eprintln!("== scenario {}: {}", s.id, s.title);
        let t = Instant::now();
        let run = s.run;
        let result = std::panic::catch_unwind(move || run(&mode));
        let mut rs = match result {
            Ok(rs) if !rs.is_empty() => rs,
            Ok(_) => vec![ScenarioReport::failed_to_run(
                s.id,
                s.title,
                "-",
                "produced no report",
            )],
            Err(p) => {
                let why = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                vec![ScenarioReport::failed_to_run(
                    s.id,
                    s.title,
                    "-",
                    &format!("panicked: {why}"),
                )]
            }
        };
        let per = t.elapsed() / u32::try_from(rs.len()).unwrap_or(1).max(1);
        for r in &mut rs {
            if r.duration.is_zero() {
                r.duration = per;
            }
            eprintln!(
                "   {} {} [{}]: {} — {}",
                if r.passed() { "PASS" } else { "FAIL" },
                r.id,
                r.backend,
                r.checks
                    .iter()
                    .map(|c| format!("{}{}", if c.pass { "" } else { "✘ " }, c.what))
                    .collect::<Vec<_>>()
                    .join("; "),
                r.figures
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        reports.extend(rs);
    }
    let failed = reports.iter().filter(|r| !r.passed()).count();
    let command = if short {
        "bash scripts/reliability.sh --short"
    } else {
        "bash scripts/reliability.sh"
    };
    let header = format!(
        "Generated by `reliability{}` in {:.0} s on this machine ({} CPUs; loopback only; {}, {}, webdis from Debian). Every figure below was measured in this run.",
        if short { " --short" } else { "" },
        started.elapsed().as_secs_f64(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        version_of(&edgelock_devtools::etcd_bin(), "etcd"),
        version_of("/usr/bin/redis-server", "redis-server"),
    );
    let md = render(&reports, command, &header);
    match out {
        Some(path) => {
            if let Err(e) = std::fs::write(&path, md) {
                eprintln!("reliability: cannot write {path}: {e}");
                std::process::exit(74);
            }
            eprintln!("wrote {path}");
        }
        None => print!("{md}"),
    }
    eprintln!(
        "{} scenario runs, {} failed, {:.0} s",
        reports.len(),
        failed,
        started.elapsed().as_secs_f64()
    );
    if failed > 0 || reports.is_empty() {
        std::process::exit(1);
    }
}

/// `etcd Version: 3.4.23` → "etcd 3.4.23" (the first version-looking word of
/// `<bin> --version`), or just `name` when it cannot be told.
fn version_of(bin: &str, name: &str) -> String {
    let out = std::process::Command::new(bin)
        .arg("--version")
        .output()
        .ok();
    let text = out
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let version = text
        .split(|c: char| c.is_whitespace() || c == '=')
        .find(|w| w.chars().next().is_some_and(|c| c.is_ascii_digit()) && w.contains('.'));
    match version {
        Some(v) => format!("{name} {v}"),
        None => name.to_string(),
    }
}
