//! Did-you-mean: the known name nearest to a mistyped one (request fields, query parameters,
//! time zones), by edit distance (`strsim`'s optimal string alignment: a swap of two neighbours is one edit).

/// The name in `known` nearest to `name`, when it is close: at most a third of the name's
/// length (and at least 1) edits away, or one name holding the other (`max_delay` →
/// `max_delay_sec`). Ties go to the first in `known`.
pub fn nearest<'a>(name: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let limit = (name.chars().count() / 3).max(1);
    let holds = |k: &str| name.len().min(k.len()) >= 4 && (k.contains(name) || name.contains(k));
    known
        .into_iter()
        .map(|k| (strsim::osa_distance(name, k), k))
        .filter(|(d, k)| *d <= limit || holds(k))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// The IANA time zone a mistyped `name` most likely means: the same name in another case
/// (`europe/berlin`), a zone whose city is the name (`Berlin`, `new york`), or the nearest by
/// edit distance ignoring case (`Europe/Berln`). Legacy aliases (`US/…`, `Etc/…`, names
/// without a region) are offered only when nothing else fits.
pub fn time_zone(name: &str) -> Option<&'static str> {
    let wanted = name.trim().replace(' ', "_").to_ascii_lowercase();
    if wanted.is_empty() {
        return None;
    }
    let mut zones: Vec<&'static str> = chrono_tz::TZ_VARIANTS.iter().map(|tz| tz.name()).collect();
    // Canonical region/city names first, so that they win ties.
    zones.sort_by_key(|z| legacy(z));
    let lower: Vec<String> = zones.iter().map(|z| z.to_ascii_lowercase()).collect();
    let city = |z: &str| z.rsplit('/').next().unwrap_or(z).to_string();
    if let Some(i) = lower.iter().position(|z| *z == wanted) {
        return Some(zones[i]);
    }
    if let Some(i) = lower.iter().position(|z| city(z) == wanted) {
        return Some(zones[i]);
    }
    let by_name = nearest(&wanted, lower.iter().map(String::as_str));
    let cities: Vec<String> = lower.iter().map(|z| city(z)).collect();
    let by_city = if wanted.contains('/') {
        None
    } else {
        nearest(&wanted, cities.iter().map(String::as_str))
    };
    let index = match (by_name, by_city) {
        (Some(n), _) => lower.iter().position(|z| z == n),
        (None, Some(c)) => cities.iter().position(|z| z == c),
        (None, None) => None,
    }?;
    Some(zones[index])
}

/// Whether a zone name is a legacy alias rather than a region/city name.
fn legacy(zone: &str) -> bool {
    !zone.contains('/')
        || [
            "US/", "Etc/", "SystemV/", "Canada/", "Brazil/", "Mexico/", "Chile/",
        ]
        .iter()
        .any(|p| zone.starts_with(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_names() {
        let known = ["name", "url", "filter_events", "max_delay_sec"];
        assert_eq!(nearest("nmae", known), Some("name"));
        assert_eq!(nearest("filter_event", known), Some("filter_events"));
        assert_eq!(nearest("max_delay", known), Some("max_delay_sec"));
        assert_eq!(nearest("colour", known), None);
        assert_eq!(nearest("", known), None);
    }

    #[test]
    fn time_zones() {
        for (typed, meant) in [
            ("Berlin", "Europe/Berlin"),
            ("berlin", "Europe/Berlin"),
            ("europe/berlin", "Europe/Berlin"),
            ("EUROPE/BERLIN", "Europe/Berlin"),
            ("Europe/Berln", "Europe/Berlin"),
            ("Europ/Berlin", "Europe/Berlin"),
            ("new york", "America/New_York"),
            ("Tokyo", "Asia/Tokyo"),
            ("utc", "UTC"),
        ] {
            assert_eq!(time_zone(typed), Some(meant), "{typed}");
        }
        assert_eq!(time_zone("Mars/Olympus"), None);
        assert_eq!(time_zone("+02:00"), None);
        assert_eq!(time_zone(""), None);
    }
}
