//! Exposure and node access in the rendered stacks: public, private
//! (per-zone and single NAT) and internal variants pass cfn-lint; private
//! subnets have no route to an internet gateway (read from the rendered
//! template's route tables, associations and routes); the API's security
//! groups admit 6443 only from apiEndpoint.allowedCIDRs and the nodes; SSH
//! only with keyName and sshAllowedCIDRs; SSM's managed policy on every node
//! role unless turned off; `init --api-allowed-cidr` writes what it is told
//! (and private subnets with it), or says the API is open to the internet.
//!
//! Not covered here: whether AWS routes packets as the template says (no AWS
//! account here; moto does not model routing or security group filtering),
//! the SSM agent answering a session, or an SSH login.

use crate::common;
use crate::render_fixtures;

use std::collections::BTreeMap;
use std::process::Command;

use kube_aws::render::{self, write_rendered, RenderInput};
use render_fixtures::load;
use serde_json::{json, Value};

const BASE: &str = "clusterName: expo\nregion: us-west-2\ns3URI: s3://kube-aws-test\n\
                    worker:\n  nodePools:\n    - name: general\n      count: 2\n    - name: batch\n      count: 1\n";

fn input(extra: &str) -> RenderInput {
    let c = load(&format!("{BASE}{extra}"));
    RenderInput::new(c.config, vec![])
}

/// Every rendered stack, parsed: name (`network`, `control-plane`, …) -> template.
fn stacks(input: &RenderInput) -> BTreeMap<String, Value> {
    let r = render::render(input).unwrap_or_else(|e| panic!("render failed: {e}"));
    r.files
        .iter()
        .filter_map(|(p, b)| {
            let name = p.strip_prefix("stacks/")?.strip_suffix(".json")?;
            Some((name.to_string(), serde_json::from_slice(b).unwrap()))
        })
        .collect()
}

fn resources<'a>(t: &'a Value, ty: &str) -> Vec<(&'a str, &'a Value)> {
    t["Resources"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(_, v)| v["Type"] == ty)
        .map(|(k, v)| (k.as_str(), v))
        .collect()
}

fn cfn_lint(input: &RenderInput) -> usize {
    let r = render::render(input).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("rendered");
    write_rendered(dir.path(), &out, &r).unwrap();
    let files: Vec<_> = r
        .files
        .keys()
        .filter(|p| p.starts_with("stacks/"))
        .map(|p| out.join(p))
        .collect();
    let o = Command::new(common::tool("cfn-lint"))
        .args(["--non-zero-exit-code", "error"])
        .args(&files)
        .output()
        .expect("cfn-lint runs");
    assert!(
        o.status.success(),
        "cfn-lint:\n{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    files.len()
}

const PRIVATE: &str = "network:\n  privateSubnets: true\n  availabilityZones: [us-west-2a, us-west-2b, us-west-2c]\n";
const PRIVATE_SINGLE: &str = "network:\n  privateSubnets: true\n  natGateways: single\n";
const INTERNAL: &str = "apiEndpoint:\n  internal: true\n  allowedCIDRs: [10.0.0.0/8]\n";

#[test]
fn cfn_lint_accepts_public_private_and_internal_variants() {
    for (name, extra) in [
        ("public", String::new()),
        ("private, a NAT gateway per zone", PRIVATE.to_string()),
        ("private, one NAT gateway", PRIVATE_SINGLE.to_string()),
        ("internal", INTERNAL.to_string()),
        ("private and internal", format!("{PRIVATE}{INTERNAL}")),
        (
            "ssh, no ssm",
            "nodeAccess:\n  ssm: false\n  keyName: ops\n  sshAllowedCIDRs: [203.0.113.0/24]\n".to_string(),
        ),
    ] {
        let n = cfn_lint(&input(&extra));
        assert_eq!(n, 5, "{name}: root, network, control-plane and two pools");
    }
}

/// The route table of each subnet, by subnet logical id, from the associations.
fn route_tables(net: &Value) -> BTreeMap<String, String> {
    resources(net, "AWS::EC2::SubnetRouteTableAssociation")
        .into_iter()
        .map(|(_, a)| {
            let p = &a["Properties"];
            (
                p["SubnetId"]["Ref"].as_str().unwrap().to_string(),
                p["RouteTableId"]["Ref"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// The routes of a route table: (destination, target kind, target logical id).
fn routes<'a>(net: &'a Value, table: &str) -> Vec<(&'a str, &'a str, &'a str)> {
    resources(net, "AWS::EC2::Route")
        .into_iter()
        .filter(|(_, r)| r["Properties"]["RouteTableId"]["Ref"] == table)
        .map(|(_, r)| {
            let p = r["Properties"].as_object().unwrap();
            let (kind, target) = p
                .iter()
                .find(|(k, _)| k.ends_with("Id") && *k != "RouteTableId")
                .map(|(k, v)| (k.as_str(), v["Ref"].as_str().unwrap_or("?")))
                .unwrap();
            (p["DestinationCidrBlock"].as_str().unwrap(), kind, target)
        })
        .collect()
}

#[test]
fn private_subnets_have_no_route_to_an_internet_gateway() {
    for (extra, nats) in [(PRIVATE, 3), (PRIVATE_SINGLE, 1)] {
        let s = stacks(&input(extra));
        let net = &s["network"];
        let gateways: Vec<&str> = resources(net, "AWS::EC2::InternetGateway")
            .iter()
            .map(|(k, _)| *k)
            .collect();
        assert_eq!(gateways.len(), 1);
        let tables = route_tables(net);
        let subnets = resources(net, "AWS::EC2::Subnet");
        let (private, public): (Vec<_>, Vec<_>) = subnets
            .iter()
            .partition(|(_, v)| v["Properties"]["MapPublicIpOnLaunch"] == false);
        assert_eq!(private.len(), public.len(), "{extra}: a public subnet per private one");
        assert!(!private.is_empty());
        for (name, _) in &private {
            let table = tables.get(*name).unwrap_or_else(|| panic!("{name} has no route table"));
            let rs = routes(net, table);
            assert!(!rs.is_empty(), "{name}: no way out at all");
            for (dest, kind, target) in &rs {
                assert_eq!(*kind, "NatGatewayId", "{name}: route to {dest} via {kind} {target}");
                assert!(!gateways.contains(target), "{name} routes to the internet gateway");
            }
        }
        for (name, _) in &public {
            let rs = routes(net, &tables[*name]);
            assert!(
                rs.iter().any(|(_, k, _)| *k == "GatewayId"),
                "{name}: public without a way out"
            );
        }
        // The NAT gateways sit in public subnets; the nodes' groups use the private ones.
        let nat: Vec<_> = resources(net, "AWS::EC2::NatGateway");
        assert_eq!(nat.len(), nats, "{extra}");
        for (_, n) in &nat {
            let subnet = n["Properties"]["SubnetId"]["Ref"].as_str().unwrap();
            assert!(public.iter().any(|(p, _)| *p == subnet), "NAT gateway in {subnet}");
        }
        let node_subnets = &net["Outputs"]["SubnetIds"]["Value"]["Fn::Join"][1];
        for s in node_subnets.as_array().unwrap() {
            let name = s["Ref"].as_str().unwrap();
            assert!(private.iter().any(|(p, _)| *p == name), "nodes in {name}");
        }
        // Node boot reads S3 through the gateway endpoint on every private route table.
        let endpoints = resources(net, "AWS::EC2::VPCEndpoint");
        assert_eq!(endpoints.len(), 1);
        let ep = &endpoints[0].1["Properties"];
        assert_eq!(ep["VpcEndpointType"], "Gateway");
        assert_eq!(ep["ServiceName"], json!({"Fn::Sub": "com.amazonaws.${AWS::Region}.s3"}));
        let mut on: Vec<&str> = ep["RouteTableIds"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["Ref"].as_str().unwrap())
            .collect();
        let mut want: Vec<&str> = private.iter().map(|(p, _)| tables[*p].as_str()).collect();
        on.sort();
        want.sort();
        want.dedup();
        assert_eq!(on, want);
        // The internet-facing load balancer stays in the public subnets.
        let lb = &resources(net, "AWS::ElasticLoadBalancingV2::LoadBalancer")[0].1["Properties"];
        assert_eq!(lb["Scheme"], "internet-facing");
        for s in lb["Subnets"].as_array().unwrap() {
            assert!(public.iter().any(|(p, _)| *p == s["Ref"]), "load balancer in {s}");
        }
    }
    // Without privateSubnets, no NAT, no private table, nodes keep public IPs.
    let s = stacks(&input(""));
    assert!(resources(&s["network"], "AWS::EC2::NatGateway").is_empty());
    assert!(resources(&s["network"], "AWS::EC2::Subnet")
        .iter()
        .all(|(_, v)| v["Properties"]["MapPublicIpOnLaunch"] == true));
}

#[test]
fn internal_makes_the_load_balancer_internal_in_the_node_subnets() {
    let s = stacks(&input(&format!("{PRIVATE}{INTERNAL}")));
    let net = &s["network"];
    let lb = &resources(net, "AWS::ElasticLoadBalancingV2::LoadBalancer")[0].1["Properties"];
    assert_eq!(lb["Scheme"], "internal");
    assert_eq!(lb["Subnets"], net["Outputs"]["SubnetIds"]["Value"]["Fn::Join"][1]);
}

/// The ingress rules of a security group: inline ones and separate ingress
/// resources, as (from port, to port, source: a CIDR or a group's logical id).
fn ingress(net: &Value, group: &str) -> Vec<(i64, i64, String)> {
    let rule = |r: &Value| {
        let source = match (&r["CidrIp"], &r["SourceSecurityGroupId"]["Fn::GetAtt"][0]) {
            (Value::String(c), _) => c.clone(),
            (Value::Object(sub), _) => sub["Fn::Sub"].as_str().unwrap().to_string(),
            (_, Value::String(g)) => g.clone(),
            _ => panic!("rule without a source: {r}"),
        };
        (
            r["FromPort"].as_i64().unwrap_or(-1),
            r["ToPort"].as_i64().unwrap_or(-1),
            source,
        )
    };
    let mut out: Vec<_> = net["Resources"][group]["Properties"]["SecurityGroupIngress"]
        .as_array()
        .into_iter()
        .flatten()
        .map(rule)
        .collect();
    for (_, r) in resources(net, "AWS::EC2::SecurityGroupIngress") {
        if r["Properties"]["GroupId"]["Fn::GetAtt"][0] == group {
            out.push(rule(&r["Properties"]));
        }
    }
    out.sort();
    out
}

#[test]
fn security_groups_admit_the_api_from_allowed_cidrs_and_nodes_only() {
    let s = stacks(&input(&format!(
        "{PRIVATE}apiEndpoint:\n  allowedCIDRs: [203.0.113.0/24, 198.51.100.7/32]\n"
    )));
    let net = &s["network"];
    let api = |c: &str| (6443, 6443, c.to_string());
    // The nodes reach an internet-facing load balancer from their NAT
    // gateways' public addresses (one per zone here), not as their groups.
    let nat = |i: usize| api(&format!("${{NatAddress{i}}}/32"));
    assert_eq!(
        ingress(net, "ApiSecurityGroup"),
        [
            nat(0),
            nat(1),
            nat(2),
            api("198.51.100.7/32"),
            api("203.0.113.0/24"),
            api("ControllerSecurityGroup"),
            api("WorkerSecurityGroup")
        ]
    );
    for i in 0..3 {
        assert_eq!(net["Resources"][format!("NatAddress{i}")]["Type"], "AWS::EC2::EIP");
    }
    // Internal: the nodes use its private addresses, their groups suffice.
    let s = stacks(&input(&format!("{PRIVATE}{INTERNAL}")));
    assert_eq!(
        ingress(&s["network"], "ApiSecurityGroup"),
        [
            api("10.0.0.0/8"),
            api("ControllerSecurityGroup"),
            api("WorkerSecurityGroup")
        ]
    );
    let s = stacks(&input(
        "apiEndpoint:\n  allowedCIDRs: [203.0.113.0/24, 198.51.100.7/32]\n  internal: true\n",
    ));
    let net = &s["network"];
    // The controllers: the API only from the load balancer (client IPs are
    // not preserved, so the source is always the load balancer, health checks
    // included); node-to-node as before (-1: every port).
    assert_eq!(
        ingress(net, "ControllerSecurityGroup"),
        [
            (-1, -1, "ControllerSecurityGroup".to_string()),
            (-1, -1, "WorkerSecurityGroup".to_string()),
            api("ApiSecurityGroup"),
        ]
    );
    assert_eq!(
        ingress(net, "WorkerSecurityGroup"),
        [
            (-1, -1, "ControllerSecurityGroup".to_string()),
            (-1, -1, "WorkerSecurityGroup".to_string()),
        ]
    );
    let lb = &resources(net, "AWS::ElasticLoadBalancingV2::LoadBalancer")[0].1["Properties"];
    assert_eq!(
        lb["SecurityGroups"],
        json!([{"Fn::GetAtt": ["ApiSecurityGroup", "GroupId"]}])
    );
    let tg = &resources(net, "AWS::ElasticLoadBalancingV2::TargetGroup")[0].1["Properties"];
    assert_eq!(
        tg["TargetGroupAttributes"],
        json!([{"Key": "preserve_client_ip.enabled", "Value": "false"}])
    );
    // The default is the whole internet, stated in the rule.
    let s = stacks(&input(""));
    assert!(ingress(&s["network"], "ApiSecurityGroup").contains(&api("0.0.0.0/0")));
    // Nowhere is port 22 open by default, keyName or not.
    for extra in ["", "nodeAccess:\n  keyName: ops\n"] {
        let s = stacks(&input(extra));
        for g in ["ControllerSecurityGroup", "WorkerSecurityGroup", "ApiSecurityGroup"] {
            assert!(
                ingress(&s["network"], g).iter().all(|(from, _, _)| *from != 22),
                "{extra:?}: {g}"
            );
        }
    }
}

fn roles(s: &BTreeMap<String, Value>) -> Vec<(String, &Value)> {
    s.iter()
        .flat_map(|(name, t)| {
            resources(t, "AWS::IAM::Role")
                .into_iter()
                .map(move |(_, r)| (name.clone(), r))
        })
        .collect()
}

fn launch_templates(s: &BTreeMap<String, Value>) -> Vec<&Value> {
    s.values()
        .flat_map(|t| resources(t, "AWS::EC2::LaunchTemplate").into_iter().map(|(_, v)| v))
        .map(|v| &v["Properties"]["LaunchTemplateData"])
        .collect()
}

#[test]
fn ssm_on_every_node_role_by_default_and_ssh_only_when_asked() {
    let ssm = json!([{"Fn::Sub": "arn:${AWS::Partition}:iam::aws:policy/AmazonSSMManagedInstanceCore"}]);
    let s = stacks(&input(""));
    let r = roles(&s);
    assert_eq!(r.len(), 3, "a controller role and one per pool");
    for (stack, role) in &r {
        assert_eq!(role["Properties"]["ManagedPolicyArns"], ssm, "{stack}");
    }
    assert!(launch_templates(&s).iter().all(|lt| lt.get("KeyName").is_none()));

    let s = stacks(&input(
        "nodeAccess:\n  ssm: false\n  keyName: ops-key\n  sshAllowedCIDRs: [203.0.113.0/24]\n",
    ));
    for (stack, role) in roles(&s) {
        assert!(role["Properties"].get("ManagedPolicyArns").is_none(), "{stack}");
        let text = role.to_string();
        // No Session Manager grant. (The controller keeps `ssm:GetParameter` on
        // its own addon-plan pointer: that is the addon reconciler's, not access.)
        for grant in [
            "AmazonSSM",
            "ssmmessages:",
            "ec2messages:",
            "ssm:UpdateInstanceInformation",
        ] {
            assert!(!text.contains(grant), "{stack}: {grant} in {text}");
        }
    }
    let lts = launch_templates(&s);
    assert_eq!(lts.len(), 3);
    assert!(lts.iter().all(|lt| lt["KeyName"] == "ops-key"));
    let net = &s["network"];
    for g in ["ControllerSecurityGroup", "WorkerSecurityGroup"] {
        assert!(
            ingress(net, g).contains(&(22, 22, "203.0.113.0/24".to_string())),
            "{g}: {:?}",
            ingress(net, g)
        );
    }
    assert!(ingress(net, "ApiSecurityGroup").iter().all(|(from, _, _)| *from != 22));
}

fn init(args: &[&str]) -> (std::process::Output, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kube-aws"))
        .current_dir(dir.path())
        .env("NO_COLOR", "1")
        .args(["init", "c", "--cluster-name", "demo"])
        .args(args)
        .output()
        .unwrap();
    (out, dir)
}

#[test]
fn init_writes_the_cidrs_it_is_told_or_says_the_api_is_open() {
    let (out, dir) = init(&[
        "--api-allowed-cidr",
        "203.0.113.0/24",
        "--api-allowed-cidr",
        "198.51.100.7/32",
    ]);
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("open only to 203.0.113.0/24, 198.51.100.7/32"),
        "{stdout}"
    );
    assert!(!stdout.contains("open to the internet"), "{stdout}");
    let c = kube_aws::config::load_cluster(&dir.path().join("c")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        c.config.api_endpoint.allowed_cidrs,
        ["203.0.113.0/24", "198.51.100.7/32"]
    );
    assert!(
        c.config.network.private_subnets,
        "a narrowed API puts the nodes behind NAT"
    );
    assert!(c.config.node_access.ssm);

    let (out, dir) = init(&[]);
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("warning: the Kubernetes API is open to the internet"),
        "{stdout}"
    );
    let c = kube_aws::config::load_cluster(&dir.path().join("c")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.config.api_endpoint.allowed_cidrs, ["0.0.0.0/0"]);
    assert!(!c.config.network.private_subnets);

    // A bad CIDR: exit 1, quoted, nothing written.
    let (out, dir) = init(&["--api-allowed-cidr", "203.0.113.5/24"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--api-allowed-cidr: \"203.0.113.5/24\" is not an IPv4 network CIDR"),
        "{stderr}"
    );
    assert!(!dir.path().join("c").exists(), "nothing written");
}
