use super::*;
use serde_json::json;

fn longest() -> Longest {
    Longest::new(
        "a-twenty-char-name-x",
        "ap-southeast-2",
        "control-plane",
        Some("arn:aws:kms:ap-southeast-2:111122223333:key/0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"),
    )
}

#[test]
fn substitutions_are_resolved_at_their_longest() {
    let l = longest();
    let v = l.resolve(&json!({"Fn::Sub":
        "arn:${AWS::Partition}:cloudformation:${AWS::Region}:${AWS::AccountId}:stack/${AWS::StackName}/*"}));
    assert_eq!(
        v,
        json!("arn:aws:cloudformation:ap-southeast-2:123456789012:stack/a-twenty-char-name-x-ControlPlane-XXXXXXXXXXXXX/*")
    );
    let g = l.resolve(&json!({"Fn::Sub": "group/${ControllerGroup}"}));
    assert_eq!(
        g,
        json!("group/a-twenty-char-name-x-ControlPlane-XXXXXXXXXXXXX-ControllerGroup-XXXXXXXXXXXXX")
    );
    assert_eq!(l.resolve(&json!({"Fn::Sub": "${!Literal}"})), json!("${Literal}"));
    assert_eq!(
        l.resolve(&json!({"Fn::Sub": ["x-${A}", {"A": {"Ref": "AWS::Region"}}]})),
        json!("x-ap-southeast-2")
    );
}

#[test]
fn the_decrypt_key_list_has_room_for_the_retired_keys() {
    let l = longest();
    let keys = l.resolve(&json!({"Fn::Split": [",", {"Ref": "DecryptKmsKeyARNs"}]}));
    let keys = keys.as_array().unwrap();
    assert_eq!(keys.len(), 1 + MAX_RETIRED_KEYS);
    assert!(keys[0].as_str().unwrap().ends_with("a5b4c3d2e1f0"));
    for k in &keys[1..] {
        assert_eq!(k.as_str().unwrap().len(), keys[0].as_str().unwrap().len());
    }
}

#[test]
fn size_is_the_resolved_text_without_white_space() {
    let l = longest();
    let doc = json!({"Statement": [{"Resource": {"Fn::Sub": "${AWS::AccountId} x"}}]});
    // {"Statement":[{"Resource":"123456789012x"}]}
    assert_eq!(l.chars(&doc), r#"{"Statement":[{"Resource":"123456789012x"}]}"#.len());
    // Not the template text's size.
    assert_ne!(count_chars(&doc), l.chars(&doc));
}

#[test]
fn roles_collect_inline_attached_and_managed_policies() {
    let t = json!({"Resources": {
        "R": {"Type": "AWS::IAM::Role", "Properties": {
            "Policies": [{"PolicyName": "p", "PolicyDocument": {"Statement": [{"Sid": "A"}]}}],
            "ManagedPolicyArns": ["arn:aws:iam::aws:policy/X"]}},
        "I": {"Type": "AWS::IAM::Policy", "Properties": {"Roles": [{"Ref": "R"}],
            "PolicyDocument": {"Statement": [{"Sid": "B"}, {"Sid": "C"}]}}},
        "M": {"Type": "AWS::IAM::ManagedPolicy", "Properties": {"Roles": [{"Ref": "R"}],
            "PolicyDocument": {"Statement": [{"Sid": "D"}]}}},
        "Other": {"Type": "AWS::IAM::ManagedPolicy", "Properties": {"Roles": [{"Ref": "S"}],
            "PolicyDocument": {"Statement": [{"Sid": "E"}]}}}}});
    let r = &role_sizes("control-plane", &t, &longest())[0];
    assert_eq!(r.inline.len(), 2);
    assert_eq!(r.managed.len(), 1);
    assert_eq!(r.attached, 2);
    assert_eq!(r.statements(), 4);
    assert!(exceeded(r).is_none());
    let all = role_statements(&t, "R");
    let sids: Vec<&str> = all.iter().map(|s| s["Sid"].as_str().unwrap()).collect();
    assert_eq!(sids, ["A", "B", "C", "D"]);
}

#[test]
fn each_limit_is_enforced() {
    let big = |n: usize| json!({"Statement": [{"Sid": "x".repeat(n)}]});
    let role = |inline: usize, managed: usize, arns: usize| {
        json!({"Resources": {
            "R": {"Type": "AWS::IAM::Role", "Properties": {
                "Policies": [{"PolicyName": "p", "PolicyDocument": big(inline)}],
                "ManagedPolicyArns": vec!["a"; arns]}},
            "M": {"Type": "AWS::IAM::ManagedPolicy", "Properties": {"Roles": [{"Ref": "R"}],
                "PolicyDocument": big(managed)}}}})
    };
    let l = longest();
    let frame = r#"{"Statement":[{"Sid":""}]}"#.len();
    let check = |t: &Value| exceeded(&role_sizes("root", t, &l)[0]).map(|e| (e.size, e.limit));
    assert_eq!(check(&role(ROLE_INLINE_LIMIT - frame, 10, 0)), None);
    assert_eq!(
        check(&role(ROLE_INLINE_LIMIT - frame + 1, 10, 0)),
        Some((ROLE_INLINE_LIMIT + 1, ROLE_INLINE_LIMIT))
    );
    assert_eq!(check(&role(10, MANAGED_POLICY_LIMIT - frame, 0)), None);
    assert_eq!(
        check(&role(10, MANAGED_POLICY_LIMIT - frame + 1, 0)),
        Some((MANAGED_POLICY_LIMIT + 1, MANAGED_POLICY_LIMIT))
    );
    assert_eq!(check(&role(10, 10, ROLE_ATTACHMENT_LIMIT - 1)), None);
    assert_eq!(
        check(&role(10, 10, ROLE_ATTACHMENT_LIMIT)),
        Some((ROLE_ATTACHMENT_LIMIT + 1, ROLE_ATTACHMENT_LIMIT))
    );
}

#[test]
fn the_refusal_names_the_longest_contributor_and_by_how_much() {
    let e = Exceeded {
        what: "stack \"control-plane\": role ControllerRole's inline policies".into(),
        size: 10_250,
        limit: ROLE_INLINE_LIMIT,
        texts: vec!["arn:aws:s3:::a-long-bucket-name/p/c x a-long-bucket-name c".into()],
    };
    let names = [
        Name {
            key: "clusterName",
            what: "the cluster name",
            value: "c".into(),
        },
        Name {
            key: "s3URI",
            what: "the bucket name",
            value: "a-long-bucket-name".into(),
        },
    ];
    let (key, message) = explain(&e, &names);
    assert_eq!(key, Some("s3URI"));
    // 10 over, twice in the text: 5 characters shorter.
    assert!(
        message.contains("\"a-long-bucket-name\" (18 characters) appears 2 times"),
        "{message}"
    );
    assert!(message.contains("shorten it by at least 5 characters"), "{message}");
    assert!(
        message.contains("10250 characters") && message.contains("limit: 10240"),
        "{message}"
    );
}

#[test]
fn chunks_fit_a_managed_policy() {
    let l = longest();
    let st: Vec<Value> = (0..40)
        .map(|i| json!({"Sid": format!("S{i}"), "Resource": "x".repeat(400)}))
        .collect();
    let chunks = chunk(&st, &l);
    assert!(chunks.len() > 1);
    assert_eq!(chunks.iter().map(Vec::len).sum::<usize>(), 40);
    for c in &chunks {
        let doc = json!({"Version": "2012-10-17", "Statement": c});
        assert!(l.chars(&doc) <= MANAGED_POLICY_LIMIT, "{}", l.chars(&doc));
    }
    // Order is kept.
    let flat: Vec<&Value> = chunks.iter().flatten().collect();
    assert_eq!(flat[39]["Sid"], "S39");
}
