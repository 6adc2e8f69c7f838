//! The `network` stack: the VPC (new, see `subnets`, or an existing one),
//! the security groups of the API load balancer and the nodes, and the API's
//! network load balancer.

use serde_json::{json, Map, Value};

use super::super::{Ctx, RenderError, RenderInput};
use super::subnets::new_vpc_subnets;
use super::{tags, template};
use crate::config::DEFAULT_VPC_CIDR;

pub use crate::config::default_zone_count;

/// The zones of a new VPC: network.availabilityZones when listed; else the
/// count the live stack recorded at `up` (`update` passes it in:
/// `Network::recorded_zone_count`), so that scaling the controllers never
/// adds or deletes a subnet; else, for a new cluster, `default_zone_count`.
/// None for an existing VPC.
pub fn new_vpc_zone_count(cluster: &crate::config::ClusterConfig) -> Option<usize> {
    if cluster.network.vpc_id.is_some() {
        return None;
    }
    Some(cluster.node_subnet_count())
}

pub(super) fn network_stack(input: &RenderInput, ctx: &Ctx) -> Result<Map<String, Value>, RenderError> {
    let (net, api, access) = (
        &input.cluster.network,
        &input.cluster.api_endpoint,
        &input.cluster.node_access,
    );
    let mut t = template(format!("kube-aws cluster {}: network", ctx.cluster));
    let mut r = Map::new();
    // (VPC, node subnets, the API load balancer's subnets, what the load
    // balancer waits for, the NAT gateways' addresses)
    type Layout<'a> = (Value, Vec<Value>, Vec<Value>, Option<&'a str>, Vec<String>);
    let (vpc, subnets, lb_subnets, gateway, nat_addresses): Layout = match &net.vpc_id {
        Some(id) => {
            let ids: Vec<Value> = net.subnet_ids.iter().map(|s| json!(s)).collect();
            (json!(id), ids.clone(), ids, None, Vec::new())
        }
        None => {
            let cidr = net.vpc_cidr.as_deref().unwrap_or(DEFAULT_VPC_CIDR);
            r.insert(
                "Vpc".into(),
                json!({"Type": "AWS::EC2::VPC", "Properties": {
                    "CidrBlock": cidr, "EnableDnsSupport": true, "EnableDnsHostnames": true,
                    "Tags": tags(ctx, &ctx.cluster)}}),
            );
            r.insert(
                "InternetGateway".into(),
                json!({"Type": "AWS::EC2::InternetGateway", "Properties": {"Tags": tags(ctx, &ctx.cluster)}}),
            );
            r.insert(
                "GatewayAttachment".into(),
                json!({"Type": "AWS::EC2::VPCGatewayAttachment", "Properties": {
                    "VpcId": {"Ref": "Vpc"}, "InternetGatewayId": {"Ref": "InternetGateway"}}}),
            );
            r.insert(
                "PublicRouteTable".into(),
                json!({"Type": "AWS::EC2::RouteTable", "Properties": {
                    "VpcId": {"Ref": "Vpc"}, "Tags": tags(ctx, &ctx.cluster)}}),
            );
            r.insert(
                "PublicRoute".into(),
                json!({"Type": "AWS::EC2::Route", "DependsOn": "GatewayAttachment", "Properties": {
                    "RouteTableId": {"Ref": "PublicRouteTable"}, "DestinationCidrBlock": "0.0.0.0/0",
                    "GatewayId": {"Ref": "InternetGateway"}}}),
            );
            let made = new_vpc_subnets(input, ctx, cidr, &mut r)?;
            // An internal load balancer sits with the nodes; an internet-facing one in public subnets.
            let lb = if api.internal { made.nodes.clone() } else { made.public };
            (
                json!({"Ref": "Vpc"}),
                made.nodes,
                lb,
                Some("GatewayAttachment"),
                made.nat_addresses,
            )
        }
    };
    // The API's load balancer has a security group of its own: the target
    // group turns client IP preservation off (below), so the controllers see
    // the load balancer's private addresses, never the client's, and only the
    // load balancer's group can filter clients. The controllers admit 6443
    // from that group alone, which also covers the health checks ("Update the
    // security groups for your Network Load Balancer" and "Edit target group
    // attributes: client IP preservation", Elastic Load Balancing docs). A
    // load balancer gets security groups only when it is created.
    let mut api_rules: Vec<Value> = api
        .allowed_cidrs
        .iter()
        .map(|c| {
            json!({"IpProtocol": "tcp", "FromPort": 6443, "ToPort": 6443, "CidrIp": c,
                   "Description": "Kubernetes API from apiEndpoint.allowedCIDRs"})
        })
        .collect();
    // Nodes resolve an internet-facing load balancer's name to its public
    // addresses and reach it through the internet gateway, so it sees their
    // public source address, which no security group reference matches:
    // from private subnets, that is a NAT gateway's address (admitted here);
    // nodes in public subnets have addresses nobody knows in advance, which
    // is why validation wants 0.0.0.0/0, privateSubnets or internal there.
    if !api.internal {
        for a in &nat_addresses {
            api_rules.push(json!({"IpProtocol": "tcp", "FromPort": 6443, "ToPort": 6443,
                "CidrIp": {"Fn::Sub": format!("${{{a}}}/32")},
                "Description": "Kubernetes API from the nodes through a NAT gateway"}));
        }
    }
    let mut api_group = json!({"Type": "AWS::EC2::SecurityGroup", "Properties": {
        "GroupDescription": format!("kube-aws {} API load balancer", ctx.cluster),
        "VpcId": vpc,
        "Tags": tags(ctx, &format!("{}-api", ctx.cluster))}});
    if !api_rules.is_empty() {
        api_group["Properties"]["SecurityGroupIngress"] = json!(api_rules);
    }
    r.insert("ApiSecurityGroup".into(), api_group);
    // The nodes reach the API through the load balancer too (kubelets, the
    // SSM port forwarding of an internal endpoint). Separate rules: the node
    // groups refer to this group in turn.
    for (name, group, who) in [
        ("ApiFromControllers", "ControllerSecurityGroup", "controllers"),
        ("ApiFromWorkers", "WorkerSecurityGroup", "workers"),
    ] {
        r.insert(
            name.into(),
            json!({"Type": "AWS::EC2::SecurityGroupIngress", "Properties": {
                "GroupId": {"Fn::GetAtt": ["ApiSecurityGroup", "GroupId"]},
                "IpProtocol": "tcp", "FromPort": 6443, "ToPort": 6443,
                "SourceSecurityGroupId": {"Fn::GetAtt": [group, "GroupId"]},
                "Description": format!("Kubernetes API from the {who}")}}),
        );
    }
    // SSH only to the CIDRs listed, never by default (nodeAccess.sshAllowedCIDRs).
    let ssh = |who: &str| -> Vec<Value> {
        access
            .ssh_allowed_cidrs
            .iter()
            .map(|c| {
                json!({"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22, "CidrIp": c,
                       "Description": format!("SSH to the {who} from nodeAccess.sshAllowedCIDRs")})
            })
            .collect()
    };
    let mut controller_rules = vec![json!({"IpProtocol": "tcp", "FromPort": 6443, "ToPort": 6443,
        "SourceSecurityGroupId": {"Fn::GetAtt": ["ApiSecurityGroup", "GroupId"]},
        "Description": "Kubernetes API through the load balancer (and its health checks)"})];
    controller_rules.extend(ssh("controllers"));
    r.insert(
        "ControllerSecurityGroup".into(),
        json!({"Type": "AWS::EC2::SecurityGroup", "Properties": {
            "GroupDescription": format!("kube-aws {} controllers", ctx.cluster),
            "VpcId": vpc,
            "SecurityGroupIngress": controller_rules,
            "Tags": tags(ctx, &format!("{}-controller", ctx.cluster))}}),
    );
    let mut worker = json!({"Type": "AWS::EC2::SecurityGroup", "Properties": {
        "GroupDescription": format!("kube-aws {} workers", ctx.cluster),
        "VpcId": vpc,
        "Tags": tags(ctx, &format!("{}-worker", ctx.cluster))}});
    let worker_ssh = ssh("workers");
    if !worker_ssh.is_empty() {
        worker["Properties"]["SecurityGroupIngress"] = json!(worker_ssh);
    }
    r.insert("WorkerSecurityGroup".into(), worker);
    for (name, group, source) in [
        (
            "ControllerFromControllers",
            "ControllerSecurityGroup",
            "ControllerSecurityGroup",
        ),
        (
            "ControllerFromWorkers",
            "ControllerSecurityGroup",
            "WorkerSecurityGroup",
        ),
        (
            "WorkerFromControllers",
            "WorkerSecurityGroup",
            "ControllerSecurityGroup",
        ),
        ("WorkerFromWorkers", "WorkerSecurityGroup", "WorkerSecurityGroup"),
    ] {
        r.insert(
            name.into(),
            json!({"Type": "AWS::EC2::SecurityGroupIngress", "Properties": {
                "GroupId": {"Fn::GetAtt": [group, "GroupId"]}, "IpProtocol": "-1",
                "SourceSecurityGroupId": {"Fn::GetAtt": [source, "GroupId"]},
                "Description": "cluster traffic"}}),
        );
    }
    let scheme = if api.internal { "internal" } else { "internet-facing" };
    let mut nlb = json!({"Type": "AWS::ElasticLoadBalancingV2::LoadBalancer", "Properties": {
        "Type": "network", "Scheme": scheme, "Subnets": lb_subnets,
        "SecurityGroups": [{"Fn::GetAtt": ["ApiSecurityGroup", "GroupId"]}],
        "Tags": tags(ctx, &format!("{}-api", ctx.cluster))}});
    if let Some(g) = gateway {
        nlb["DependsOn"] = json!(g);
    }
    r.insert("ApiLoadBalancer".into(), nlb);
    r.insert(
        "ApiTargetGroup".into(),
        // Without client IP preservation a controller reaching the API through
        // the NLB may land on itself (hairpin) and still get an answer.
        //
        // The health check asks the apiserver itself, not its port: HTTPS GET
        // /readyz on 6443, healthy on 200 only. A TCP check passes while the
        // apiserver cannot reach etcd and while it drains on shutdown, when
        // /readyz answers 500 (Kubernetes docs, "Kubernetes API health
        // endpoints"). /readyz is readable without credentials: the default
        // ClusterRole system:public-info-viewer grants `get` on /healthz,
        // /livez, /readyz and /version to system:unauthenticated (Kubernetes
        // docs, "Using RBAC Authorization", Discovery roles; bootstrappolicy
        // policy.go), and kube-apiserver keeps --anonymous-auth on by default.
        // NLB health checks do not verify the certificate, so the cluster CA
        // needs no trust there; for an HTTPS check an NLB accepts a matcher of
        // HTTP codes 200-599, an interval of 10 or 30 s and a timeout of 2-120 s
        // (Elastic Load Balancing, "Health checks for Network Load Balancer
        // target groups").
        json!({"Type": "AWS::ElasticLoadBalancingV2::TargetGroup", "Properties": {
            "Protocol": "TCP", "Port": 6443, "VpcId": vpc, "TargetType": "instance",
            "HealthCheckProtocol": "HTTPS", "HealthCheckPort": "6443", "HealthCheckPath": "/readyz",
            "Matcher": {"HttpCode": "200"},
            "HealthCheckIntervalSeconds": 10, "HealthCheckTimeoutSeconds": 6,
            "HealthyThresholdCount": 2, "UnhealthyThresholdCount": 2,
            "TargetGroupAttributes": [{"Key": "preserve_client_ip.enabled", "Value": "false"}]}}),
    );
    r.insert(
        "ApiListener".into(),
        json!({"Type": "AWS::ElasticLoadBalancingV2::Listener", "Properties": {
            "LoadBalancerArn": {"Ref": "ApiLoadBalancer"}, "Port": 6443, "Protocol": "TCP",
            "DefaultActions": [{"Type": "forward", "TargetGroupArn": {"Ref": "ApiTargetGroup"}}]}}),
    );
    t.insert("Resources".into(), Value::Object(r));
    t.insert(
        "Outputs".into(),
        json!({
            "VpcId": {"Value": vpc},
            "SubnetIds": {"Value": {"Fn::Join": [",", subnets]}},
            "ControllerSecurityGroupId": {"Value": {"Fn::GetAtt": ["ControllerSecurityGroup", "GroupId"]}},
            "WorkerSecurityGroupId": {"Value": {"Fn::GetAtt": ["WorkerSecurityGroup", "GroupId"]}},
            "ApiEndpoint": {"Value": {"Fn::GetAtt": ["ApiLoadBalancer", "DNSName"]}},
            "ApiTargetGroupArn": {"Value": {"Ref": "ApiTargetGroup"}},
        }),
    );
    Ok(t)
}
