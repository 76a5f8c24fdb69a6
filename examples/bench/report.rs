//! What a scenario measured: named figures with units and targets, printed as a table or as
//! one JSON object per scenario run.

use serde_json::{Map, Value, json};

/// A target a figure is held against, e.g. `≥ 8000`.
#[derive(Debug, Clone, Copy)]
pub enum Target {
    AtLeast(f64),
    AtMost(f64),
}

impl Target {
    pub fn met(self, value: f64) -> bool {
        match self {
            Target::AtLeast(t) => value >= t,
            Target::AtMost(t) => value <= t,
        }
    }

    fn text(self) -> String {
        match self {
            Target::AtLeast(t) => format!(">= {}", number(t)),
            Target::AtMost(t) => format!("<= {}", number(t)),
        }
    }
}

/// One measured figure.
#[derive(Debug, Clone)]
pub struct Figure {
    /// The JSON key, e.g. `delivered_per_s`.
    pub key: String,
    pub value: f64,
    pub unit: &'static str,
    pub target: Option<Target>,
}

/// The result of one scenario run.
#[derive(Debug, Clone)]
pub struct Report {
    pub scenario: String,
    /// What was run (counts, clients, mode), shown in the heading and the JSON.
    pub params: Map<String, Value>,
    pub figures: Vec<Figure>,
    /// Things a reader must know about this run (a skipped part, a stall, errors).
    pub notes: Vec<String>,
}

impl Report {
    pub fn new(scenario: &str) -> Report {
        Report {
            scenario: scenario.to_string(),
            params: Map::new(),
            figures: Vec::new(),
            notes: Vec::new(),
        }
    }

    pub fn param(&mut self, key: &str, value: impl Into<Value>) -> &mut Self {
        self.params.insert(key.to_string(), value.into());
        self
    }

    pub fn add(&mut self, key: &str, value: f64, unit: &'static str) -> &mut Self {
        self.figures.push(Figure {
            key: key.to_string(),
            value,
            unit,
            target: None,
        });
        self
    }

    pub fn add_target(
        &mut self,
        key: &str,
        value: f64,
        unit: &'static str,
        target: Target,
    ) -> &mut Self {
        self.figures.push(Figure {
            key: key.to_string(),
            value,
            unit,
            target: Some(target),
        });
        self
    }

    /// Latency figures `{prefix}_p50_ms`, `_p99_ms`, `_max_ms`; the p99 may carry a target.
    pub fn add_latency(&mut self, prefix: &str, stats: &Stats, p99_target: Option<Target>) {
        self.add(&format!("{prefix}_p50_ms"), stats.p50_ms(), "ms");
        let p99 = format!("{prefix}_p99_ms");
        match p99_target {
            Some(t) => self.add_target(&p99, stats.p99_ms(), "ms", t),
            None => self.add(&p99, stats.p99_ms(), "ms"),
        };
        self.add(&format!("{prefix}_max_ms"), stats.max_ms(), "ms");
    }

    pub fn note(&mut self, text: impl Into<String>) -> &mut Self {
        self.notes.push(text.into());
        self
    }

    pub fn get(&self, key: &str) -> Option<f64> {
        self.figures.iter().find(|f| f.key == key).map(|f| f.value)
    }

    /// The param of this name, as a number.
    pub fn param_u64(&self, key: &str) -> Option<u64> {
        self.params.get(key).and_then(Value::as_u64)
    }

    /// `{"scenario": …, params…, figures…, "targets": {key: {"target", "met"}}, "notes": […]}`.
    pub fn to_json(&self) -> Value {
        let mut out = Map::new();
        out.insert("scenario".into(), json!(self.scenario));
        for (k, v) in &self.params {
            out.insert(k.clone(), v.clone());
        }
        let mut targets = Map::new();
        for f in &self.figures {
            let value = if f.value.is_finite() {
                json!((f.value * 1000.0).round() / 1000.0)
            } else {
                Value::Null
            };
            out.insert(f.key.clone(), value);
            if let Some(t) = f.target {
                targets.insert(
                    f.key.clone(),
                    json!({"target": t.text(), "met": t.met(f.value)}),
                );
            }
        }
        out.insert("targets".into(), Value::Object(targets));
        out.insert("notes".into(), json!(self.notes));
        Value::Object(out)
    }

    /// A heading and one aligned row per figure: key, value, unit, target, verdict.
    pub fn table(&self) -> String {
        let params: Vec<String> = self
            .params
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => format!("{k}={s}"),
                other => format!("{k}={other}"),
            })
            .collect();
        let mut out = format!("== {} ({})\n", self.scenario, params.join(", "));
        for f in &self.figures {
            let (target, verdict) = match f.target {
                Some(t) if t.met(f.value) => (t.text(), "ok"),
                Some(t) => (t.text(), "MISSED"),
                None => (String::new(), ""),
            };
            out.push_str(&format!(
                "  {:<34} {:>14} {:<6} {:<14} {}\n",
                f.key,
                number(f.value),
                f.unit,
                target,
                verdict
            ));
        }
        for n in &self.notes {
            out.push_str(&format!("  note: {n}\n"));
        }
        out
    }
}

/// A readable number: thousands separated above 1000, three significant decimals below.
fn number(v: f64) -> String {
    if !v.is_finite() {
        return "n/a".into();
    }
    if v.abs() >= 1000.0 {
        let int = v.round() as i64;
        let digits = int.abs().to_string();
        let mut grouped = String::new();
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i).is_multiple_of(3) {
                grouped.push(',');
            }
            grouped.push(c);
        }
        if int < 0 {
            format!("-{grouped}")
        } else {
            grouped
        }
    } else if v.fract() == 0.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

/// Percentiles of a set of durations in microseconds (nearest rank).
#[derive(Debug, Clone, Default)]
pub struct Stats {
    sorted: Vec<u64>,
}

impl Stats {
    pub fn new(mut micros: Vec<u64>) -> Stats {
        micros.sort_unstable();
        Stats { sorted: micros }
    }

    pub fn len(&self) -> usize {
        self.sorted.len()
    }

    /// The `q`-quantile (0..=1) in microseconds; NaN when empty.
    pub fn quantile_us(&self, q: f64) -> f64 {
        if self.sorted.is_empty() {
            return f64::NAN;
        }
        let rank = (q * self.sorted.len() as f64).ceil() as usize;
        self.sorted[rank.clamp(1, self.sorted.len()) - 1] as f64
    }

    pub fn p50_ms(&self) -> f64 {
        self.quantile_us(0.50) / 1000.0
    }

    pub fn p99_ms(&self) -> f64 {
        self.quantile_us(0.99) / 1000.0
    }

    pub fn max_ms(&self) -> f64 {
        self.quantile_us(1.0) / 1000.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_by_nearest_rank() {
        let s = Stats::new((1..=100).rev().collect());
        assert_eq!(s.quantile_us(0.5), 50.0);
        assert_eq!(s.quantile_us(0.99), 99.0);
        assert_eq!(s.quantile_us(1.0), 100.0);
        assert!(Stats::new(vec![]).p99_ms().is_nan());
    }

    #[test]
    fn numbers_read_well() {
        assert_eq!(number(1_234_567.4), "1,234,567");
        assert_eq!(number(12.34), "12.3");
        assert_eq!(number(0.5), "0.500");
        assert_eq!(number(f64::NAN), "n/a");
    }
}
