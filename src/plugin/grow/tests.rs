use super::*;
use serde_json::json;

fn args(pairs: &[(&str, Value)]) -> Args {
    pairs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
}

/// Every builtin filter of the tera kube-aws builds is either bounded or
/// listed as not growing: a tera update that adds one fails here.
#[test]
fn every_builtin_filter_is_classified() {
    let t = tera::Tera::default();
    let mut missing: Vec<_> = t
        .filters
        .keys()
        .filter(|k| !GROWING.iter().any(|(g, _)| g == k) && !NOT_GROWING.contains(&k.as_str()))
        .collect();
    missing.sort();
    assert!(missing.is_empty(), "unclassified tera filters: {missing:?}");
    for (g, _) in GROWING {
        assert!(t.filters.contains_key(*g), "{g} is not a tera filter");
    }
}

/// Each prediction equals the length of what tera's filter builds (or
/// bounds it, for `title`, `indent` and `group_by`).
#[test]
fn predictions_match_tera() {
    let t = tera::Tera::default();
    let s = json!("a&b<c>\"d'/\\ e\r\nf\ng ΐ straße");
    let cases: Vec<(&str, Value, Args)> = vec![
        (
            "replace",
            s.clone(),
            args(&[("from", json!("e")), ("to", json!("xyz"))]),
        ),
        ("replace", s.clone(), args(&[("from", json!("")), ("to", json!("--"))])),
        (
            "join",
            json!(["a", 1, 2.5, [1, "b"], {"k": 1}, null]),
            args(&[("sep", json!(", "))]),
        ),
        ("split", s.clone(), args(&[("pat", json!(" "))])),
        ("split", json!("abc"), args(&[("pat", json!(""))])),
        (
            "truncate",
            s.clone(),
            args(&[("length", json!(5)), ("end", json!("[more]"))]),
        ),
        ("truncate", s.clone(), args(&[("length", json!(500))])),
        ("escape", s.clone(), args(&[])),
        ("escape_xml", s.clone(), args(&[])),
        ("addslashes", s.clone(), args(&[])),
        ("linebreaksbr", s.clone(), args(&[])),
        ("upper", s.clone(), args(&[])),
        ("lower", json!("ȺİΣ"), args(&[])),
        ("capitalize", json!("ßAB"), args(&[])),
        (
            "json_encode",
            json!({"a": [1, {"b": "\u{1}"}]}),
            args(&[("pretty", json!(true))]),
        ),
        ("as_str", json!([1, [2, "x"], {"a": 1}]), args(&[])),
    ];
    for (name, v, a) in cases {
        let predict = GROWING.iter().find(|(g, _)| *g == name).unwrap().1;
        let built = t.filters[name].filter(&v, &a).unwrap();
        let len = match &built {
            Value::String(b) => b.len(),
            other => guard::value_size(other),
        };
        assert_eq!(predict(&v, &a), len, "{name}({v}, {a:?}) = {built}");
    }
    let list = json!([1, "ab"]);
    let with = args(&[("with", json!(["c", 2]))]);
    let built = t.filters["concat"].filter(&list, &with).unwrap();
    assert_eq!(concat(&list, &with), guard::value_size(&built));
    let grouped = json!([{"k": 1, "v": "a"}, {"k": "x"}, {"v": 2}]);
    let by = args(&[("attribute", json!("k"))]);
    let built = t.filters["group_by"].filter(&grouped, &by).unwrap();
    assert!(group_by(&grouped, &by) >= guard::value_size(&built));
    let text = json!("a\n\nb");
    let built = t.filters["indent"].filter(&text, &args(&[])).unwrap();
    assert!(indent(&text, &args(&[])) >= built.as_str().unwrap().len());
    let text = json!("hello wORLD ß");
    let built = t.filters["title"].filter(&text, &args(&[])).unwrap();
    assert!(title(&text, &args(&[])) >= built.as_str().unwrap().len());
}

#[test]
fn a_growing_filter_refuses_before_it_builds() {
    guard::begin();
    let big = Value::String("a".repeat(MAX_VALUE_BYTES));
    let grow = Grow {
        name: "replace",
        inner: tera::Tera::default().filters["replace"].clone(),
        predict: replace,
    };
    let a = args(&[("from", json!("a")), ("to", big.clone()), (AT_ARG, json!(7))]);
    assert!(tera::Filter::filter(&grow, &big, &a).is_err());
    match guard::stopped() {
        Some(Stop::Grow {
            offset,
            what,
            size,
            limit,
        }) => {
            assert_eq!(limit, MAX_VALUE_BYTES);
            assert_eq!(offset, 7);
            assert_eq!(what, "filter `replace`");
            assert_eq!(size, Some(MAX_VALUE_BYTES * MAX_VALUE_BYTES));
        }
        other => panic!("{other:?}"),
    }
    guard::begin();
    let small = args(&[("from", json!("a")), ("to", json!("b"))]);
    assert_eq!(tera::Filter::filter(&grow, &json!("aa"), &small).unwrap(), json!("bb"));
}
