//! docs/API.md against openapi.json: the guide must name every route (method and path), every
//! field of every reply record (in the record's own section), every request body field and
//! query parameter, and every error code the document declares. A route or field added to the
//! server and its document but not to the guide fails here.

use serde_json::Value;
use std::collections::BTreeSet;
use std::path::Path;

fn read(relative: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(relative))
        .unwrap_or_else(|e| panic!("cannot read {relative}: {e}"))
}

fn document() -> Value {
    serde_json::from_str(&read("openapi.json")).expect("openapi.json is valid JSON")
}

/// The object a local `$ref` points at (`#/components/...`), or `value` itself.
fn deref<'a>(doc: &'a Value, value: &'a Value) -> &'a Value {
    match value.get("$ref").and_then(Value::as_str) {
        Some(reference) => {
            let target = doc
                .pointer(reference.trim_start_matches('#'))
                .unwrap_or_else(|| panic!("unresolved {reference}"));
            deref(doc, target)
        }
        None => value,
    }
}

/// The name a `$ref` to a schema ends with (`Endpoint` for `#/components/schemas/Endpoint`).
fn schema_name(value: &Value) -> Option<&str> {
    value
        .get("$ref")?
        .as_str()?
        .strip_prefix("#/components/schemas/")
}

/// Property names of a schema, through `allOf` / `oneOf` / `anyOf` and references.
fn properties(doc: &Value, schema: &Value, out: &mut BTreeSet<String>) {
    let schema = deref(doc, schema);
    for key in ["allOf", "oneOf", "anyOf"] {
        for part in schema
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            properties(doc, part, out);
        }
    }
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        out.extend(props.keys().cloned());
    }
}

/// Every operation of the document: (METHOD, path, operation).
fn operations(doc: &Value) -> Vec<(String, String, &Value)> {
    let mut out = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().expect("path item") {
            if ["get", "post", "put", "patch", "delete", "head"].contains(&method.as_str()) {
                out.push((method.to_uppercase(), path.clone(), op));
            }
        }
    }
    out
}

/// `RetryPolicy` → `retry policy`: the heading a record's section has in the guide.
fn title(schema: &str) -> String {
    let mut out = String::new();
    for (i, c) in schema.chars().enumerate() {
        if c.is_uppercase() && i > 0 {
            out.push(' ');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

/// The text of the guide's section headed exactly `heading` (any level, case ignored), up to
/// the next heading of the same or a higher level.
fn section<'a>(guide: &'a str, heading: &str) -> Option<String> {
    let mut lines = guide.lines();
    let mut level = 0;
    for line in lines.by_ref() {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if hashes > 0 && line[hashes..].trim().eq_ignore_ascii_case(heading) {
            level = hashes;
            break;
        }
    }
    if level == 0 {
        return None;
    }
    let body: Vec<&'a str> = lines
        .take_while(|line| {
            let hashes = line.chars().take_while(|&c| c == '#').count();
            hashes == 0 || hashes > level
        })
        .collect();
    Some(body.join("\n"))
}

/// The records replies carry: for each reply schema, the `data` of the envelope (or the schema
/// itself where there is no envelope, as for `/healthz`), pages resolved to `Page` and their
/// items, and records nested in a record's properties.
fn reply_records(doc: &Value) -> BTreeSet<String> {
    fn visit(doc: &Value, schema: &Value, out: &mut BTreeSet<String>) {
        let Some(name) = schema_name(schema) else {
            return;
        };
        let resolved = deref(doc, schema);
        let props = &resolved["properties"];
        if props.get("code").is_some() && props.get("data").is_some() {
            // The envelope: what it carries is the record (an error's `data` is null).
            visit(doc, &props["data"], out);
        } else if props.get("items").is_some() && props.get("total").is_some() {
            out.insert("Page".into());
            visit(doc, &props["items"]["items"], out);
        } else if out.insert(name.to_string()) {
            for prop in props.as_object().into_iter().flat_map(|p| p.values()) {
                visit(doc, prop, out);
                visit(doc, &prop["items"], out);
            }
        }
    }
    let mut out = BTreeSet::new();
    for (_, _, op) in operations(doc) {
        for response in op["responses"]
            .as_object()
            .into_iter()
            .flat_map(|r| r.values())
        {
            let response = deref(doc, response);
            let schema = &response["content"]["application/json"]["schema"];
            visit(doc, schema, &mut out);
        }
    }
    out
}

/// Every error code the document declares: in a `code` enum anywhere, or written in a
/// description (`40003: …`). Codes are HTTP status × 100 + n (`40001`, `50302`).
fn error_codes(doc: &Value) -> BTreeSet<u64> {
    fn walk(value: &Value, out: &mut BTreeSet<u64>) {
        match value {
            Value::Object(map) => {
                if let Some(codes) = map
                    .get("code")
                    .and_then(|c| c.get("enum"))
                    .and_then(Value::as_array)
                {
                    out.extend(codes.iter().filter_map(Value::as_u64));
                }
                map.values().for_each(|v| walk(v, out));
            }
            Value::Array(items) => items.iter().for_each(|v| walk(v, out)),
            Value::String(text) => {
                for word in text.split(|c: char| !c.is_ascii_digit()) {
                    let is_code = word.len() == 5
                        && matches!(word.as_bytes()[0], b'4' | b'5')
                        && word.as_bytes()[3] == b'0'
                        && word.as_bytes()[4] != b'0';
                    if is_code {
                        out.insert(word.parse().unwrap());
                    }
                }
            }
            _ => {}
        }
    }
    let mut out = BTreeSet::new();
    walk(doc, &mut out);
    out
}

#[test]
fn the_guide_names_every_route() {
    let doc = document();
    let guide = read("docs/API.md");
    let missing: Vec<String> = operations(&doc)
        .into_iter()
        .map(|(method, path, _)| format!("`{method} {path}`"))
        .filter(|route| !guide.contains(route.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/API.md does not name these routes of openapi.json (write each as `METHOD /path`, \
         e.g. in the Routes table): {missing:?}"
    );
}

#[test]
fn the_guide_describes_every_field_of_every_reply_record() {
    let doc = document();
    let guide = read("docs/API.md");
    let records = reply_records(&doc);
    for expected in ["Endpoint", "Task", "Attempt", "Schedule", "Page", "Health"] {
        assert!(
            records.contains(expected),
            "{expected} not found in {records:?}"
        );
    }
    let mut missing = Vec::new();
    for record in &records {
        let heading = title(record);
        let Some(text) = section(&guide, &heading) else {
            missing.push(format!(
                "no section headed \"{heading}\" for the {record} record"
            ));
            continue;
        };
        let mut fields = BTreeSet::new();
        if record == "Page" {
            fields.extend(["total", "page", "page_size", "items"].map(String::from));
        } else {
            let schema = serde_json::json!({"$ref": format!("#/components/schemas/{record}")});
            properties(&doc, &schema, &mut fields);
        }
        for field in fields {
            if !text.contains(&format!("`{field}`")) {
                missing.push(format!("{record}.{field} (section \"{heading}\")"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "docs/API.md misses these reply fields of openapi.json (each as `field` in its record's \
         section):\n  {}",
        missing.join("\n  ")
    );
}

#[test]
fn the_guide_names_every_request_field_and_query_parameter() {
    let doc = document();
    let guide = read("docs/API.md");
    let mut names = BTreeSet::new();
    for (method, path, op) in operations(&doc) {
        let body = &op["requestBody"]["content"]["application/json"]["schema"];
        if !body.is_null() {
            properties(&doc, body, &mut names);
        }
        for parameter in op["parameters"].as_array().into_iter().flatten() {
            let parameter = deref(&doc, parameter);
            if parameter["in"] == "query" {
                let name = parameter["name"].as_str().expect("parameter name");
                names.insert(name.to_string());
                // Enumerated filter values (`status=retrying`) are part of the interface too.
                for value in parameter["schema"]["enum"].as_array().into_iter().flatten() {
                    names.insert(value.as_str().unwrap_or_default().to_string());
                }
            }
        }
        assert!(!path.is_empty() && !method.is_empty());
    }
    let missing: Vec<&String> = names
        .iter()
        .filter(|name| !name.is_empty() && !guide.contains(&format!("`{name}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/API.md does not name these request fields, query parameters or filter values of \
         openapi.json (write each as `name`): {missing:?}"
    );
}

#[test]
fn the_guide_lists_every_error_code() {
    let doc = document();
    let guide = read("docs/API.md");
    let codes = error_codes(&doc);
    for expected in [40001, 40003, 40105, 41401, 43101, 50302] {
        assert!(
            codes.contains(&expected),
            "{expected} not found in {codes:?}"
        );
    }
    let missing: Vec<u64> = codes
        .into_iter()
        .filter(|code| {
            !guide.contains(&format!("| `{code}` |")) && !guide.contains(&format!("| {code} |"))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "docs/API.md's error table lacks these codes of openapi.json: {missing:?}"
    );
}

/// The checks above can fail: a guide without a route, a field or a code is caught.
#[test]
fn the_checks_catch_what_is_missing() {
    let doc = document();
    let guide = read("docs/API.md");
    assert!(guide.contains("`POST /v1/endpoints/{id}/test`"));
    let without_field = guide.replace("`consecutive_failures`", "consecutive failures");
    let endpoint = section(&without_field, "endpoint").expect("an Endpoint section");
    assert!(!endpoint.contains("`consecutive_failures`"));
    assert_eq!(title("RetryPolicy"), "retry policy");
    assert_eq!(title("HealthUnavailable"), "health unavailable");
    // A section ends at the next heading of its level: the Endpoint record's section does not
    // run into the Retry policy one.
    assert!(!endpoint.contains("`backoff_type`"));
    assert!(
        error_codes(&serde_json::json!({"description": "30000 ms; 41401: URI too long"}))
            .into_iter()
            .eq([41401])
    );
    assert!(
        reply_records(&doc).contains("Attempt"),
        "nested in EndpointTest"
    );
}

/// The guide's worked example of delivery signatures shows what webhookd computes for its
/// inputs (the unit test `signing::tests::the_worked_example_of_the_api_guide` holds the same
/// numbers), so neither the guide nor the code can drift alone.
#[test]
fn the_delivery_signature_example_is_what_webhookd_signs() {
    let guide = read("docs/API.md");
    let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let body = br#"{"order":42}"#;
    let service = webhookd::signing::hmac_hex(secret.as_bytes(), "1764000000", body);
    let standard =
        webhookd::signing::standard_webhooks_signature(secret, "task_42", 1_764_000_000, body);
    let section = section(&guide, "Signatures on deliveries").expect("the section");
    for needle in [
        secret,
        "`1764000000`",
        "`task_42`",
        r#"`{"order":42}`"#,
        &service,
        &standard,
    ] {
        assert!(
            section.contains(needle),
            "the example does not show {needle}"
        );
    }
}
