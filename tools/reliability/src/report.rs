//! Scenario results and RELIABILITY.md.

use std::fmt::Write as _;
use std::time::Duration;

/// One pass/fail condition of a scenario ("what must hold").
#[derive(Clone, Debug)]
pub struct Check {
    pub what: String,
    pub pass: bool,
    pub detail: String,
}

/// What a scenario measured and whether its conditions held.
#[derive(Clone, Debug)]
pub struct ScenarioReport {
    pub id: String,
    pub title: String,
    pub backend: String,
    pub fault: String,
    /// Measured figures, in order: (name, value).
    pub figures: Vec<(String, String)>,
    pub checks: Vec<Check>,
    /// Findings worth reading beside the table (e.g. a protocol's known
    /// unsafety that the scenario exposes).
    pub notes: Vec<String>,
    /// Unsafety a run exposed in a protocol, a mode or a server (Redlock
    /// under restarts, an etcd bug): listed at the top of the report beside
    /// the fencing result, never hidden in a pass.
    pub findings: Vec<String>,
    pub duration: Duration,
}

impl ScenarioReport {
    pub fn new(id: &str, title: &str, backend: &str, fault: &str) -> ScenarioReport {
        ScenarioReport {
            id: id.into(),
            title: title.into(),
            backend: backend.into(),
            fault: fault.into(),
            figures: Vec::new(),
            checks: Vec::new(),
            notes: Vec::new(),
            findings: Vec::new(),
            duration: Duration::ZERO,
        }
    }

    pub fn figure(&mut self, name: &str, value: impl std::fmt::Display) {
        self.figures.push((name.into(), value.to_string()));
    }

    pub fn check(&mut self, what: &str, pass: bool, detail: impl std::fmt::Display) {
        self.checks.push(Check {
            what: what.into(),
            pass,
            detail: detail.to_string(),
        });
    }

    pub fn note(&mut self, text: impl Into<String>) {
        self.notes.push(text.into());
    }

    pub fn finding(&mut self, text: impl Into<String>) {
        self.findings.push(text.into());
    }

    /// A scenario that could not run (setup failed) fails with the reason.
    pub fn failed_to_run(id: &str, title: &str, backend: &str, why: &str) -> ScenarioReport {
        let mut r = ScenarioReport::new(id, title, backend, "-");
        r.check("scenario ran", false, why);
        r
    }

    pub fn passed(&self) -> bool {
        !self.checks.is_empty() && self.checks.iter().all(|c| c.pass)
    }
}

fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

/// Renders RELIABILITY.md.
pub fn render(reports: &[ScenarioReport], command: &str, header: &str) -> String {
    let mut md = String::new();
    let passed = reports.iter().filter(|r| r.passed()).count();
    let _ = writeln!(md, "# edgelock reliability report\n");
    let _ = writeln!(md, "{header}\n");
    let _ = writeln!(md, "Reproduce with:\n\n```sh\n{command}\n```\n");
    let _ = writeln!(
        md,
        "**{passed} of {} scenario runs passed.**\n",
        reports.len()
    );
    let findings: Vec<(&ScenarioReport, &String)> = reports
        .iter()
        .flat_map(|r| r.findings.iter().map(move |f| (r, f)))
        .collect();
    if !findings.is_empty() {
        let _ = writeln!(md, "## Findings\n\nUnsafety these runs exposed (in a protocol, an opt-in mode or a server), with what fencing did about it:\n");
        for (r, f) in findings {
            let _ = writeln!(
                md,
                "- **{} ({})** — {}",
                r.id,
                r.backend,
                f.replace('\n', " ")
            );
        }
        let _ = writeln!(md, "\n## Results\n");
    }
    let _ = writeln!(
        md,
        "| # | scenario | backend | fault | what must hold | measured | result |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|");
    for r in reports {
        let must: Vec<String> = r
            .checks
            .iter()
            .map(|c| format!("{} {}", if c.pass { "✔" } else { "✘" }, c.what))
            .collect();
        let figs: Vec<String> = r
            .figures
            .iter()
            .map(|(k, v)| format!("{k}: **{v}**"))
            .collect();
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} |",
            cell(&r.id),
            cell(&r.title),
            cell(&r.backend),
            cell(&r.fault),
            cell(&must.join("<br>")),
            cell(&figs.join("<br>")),
            if r.passed() { "pass" } else { "**FAIL**" }
        );
    }
    let _ = writeln!(md, "\n## Details\n");
    for r in reports {
        let _ = writeln!(
            md,
            "### {} — {} ({}) — {}\n",
            r.id,
            r.title,
            r.backend,
            if r.passed() { "pass" } else { "FAIL" }
        );
        let _ = writeln!(
            md,
            "Fault: {}. Took {:.1} s.\n",
            r.fault,
            r.duration.as_secs_f64()
        );
        for c in &r.checks {
            let _ = writeln!(
                md,
                "- {} {} — {}",
                if c.pass { "✔" } else { "✘" },
                c.what,
                c.detail
            );
        }
        for (k, v) in &r.figures {
            let _ = writeln!(md, "- {k}: {v}");
        }
        for f in &r.findings {
            let _ = writeln!(md, "\n> **Finding.** {}", f.replace('\n', "\n> "));
        }
        for n in &r.notes {
            let _ = writeln!(md, "\n> {}", n.replace('\n', "\n> "));
        }
        let _ = writeln!(md);
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_without_checks_or_with_a_failed_one_fails() {
        let mut r = ScenarioReport::new("1", "t", "etcd", "f");
        assert!(!r.passed());
        r.check("a", true, "");
        assert!(r.passed());
        r.check("b", false, "why");
        assert!(!r.passed());
        r.finding("a protocol gap");
        let md = render(&[r], "cmd", "h");
        assert!(md.contains("**FAIL**") && md.contains("✘ b — why") && md.contains("0 of 1"));
        assert!(md.contains("## Findings") && md.contains("- **1 (etcd)** — a protocol gap"));
    }
}
