//! The subnets of a new VPC: their CIDRs, route tables, NAT gateways and the
//! S3 gateway endpoint of private subnets.

use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use serde_json::{json, Map, Value};

use super::super::{Ctx, RenderError, RenderInput};
use super::tags;
use crate::config::{parse_cidr, NatGateways};

/// Splits `cidr` into `count` subnets four bits longer (`10.0.0.0/16` -> /20s).
pub(super) fn subnet_cidrs(cidr: &str, count: usize) -> Result<Vec<String>, RenderError> {
    let (addr, bits) = parse_cidr(cidr).ok_or_else(|| RenderError::Network {
        message: format!("network.vpcCIDR {cidr:?} is not an IPv4 CIDR like 10.0.0.0/16"),
    })?;
    if !(8..=24).contains(&bits) {
        return Err(RenderError::Network {
            message: format!("network.vpcCIDR {cidr:?}: use a prefix between /8 and /24"),
        });
    }
    if count > 16 {
        return Err(RenderError::Network {
            message: format!(
                "network.availabilityZones: {count} subnets are needed; at most 16 are supported \
                 (privateSubnets needs two per zone)"
            ),
        });
    }
    // bits is 8..=24 here, so both prefixes are valid and a /bits holds
    // 16 subnets of /bits+4, enough for count.
    let bad = |e: ipnet::PrefixLenError| RenderError::Network {
        message: format!("network.vpcCIDR {cidr:?}: {e}"),
    };
    let vpc = Ipv4Net::new(Ipv4Addr::from(addr), bits as u8).map_err(bad)?.trunc();
    Ok(vpc
        .subnets(vpc.prefix_len() + 4)
        .map_err(bad)?
        .take(count)
        .map(|n| n.to_string())
        .collect())
}

/// The subnets of a new VPC, the node subnets first: `Subnet<i>`, public
/// (internet gateway route, public IPs) or, with privateSubnets, private
/// (a route through zone i's NAT gateway only); then with privateSubnets the
/// public `PublicSubnet<i>` that hold the NAT gateways and an internet-facing
/// load balancer.
pub(super) fn new_vpc_subnets(
    input: &RenderInput,
    ctx: &Ctx,
    cidr: &str,
    r: &mut Map<String, Value>,
) -> Result<NewSubnets, RenderError> {
    let net = &input.cluster.network;
    let zones = input.cluster.node_subnet_count();
    let private = net.private_subnets;
    let cidrs = subnet_cidrs(cidr, if private { zones * 2 } else { zones })?;
    let az = |i: usize| match net.availability_zones.get(i) {
        Some(z) => json!(z),
        None => json!({"Fn::Select": [i, {"Fn::GetAZs": ""}]}),
    };
    // Subnet role tags: where the cloud controller manager puts internet-facing
    // (`elb`) and internal (`internal-elb`) load balancers.
    let subnet = |name: String, cidr: &str, i: usize, public: bool| {
        let mut t = tags(ctx, &name);
        let role = if public {
            "kubernetes.io/role/elb"
        } else {
            "kubernetes.io/role/internal-elb"
        };
        if let Some(list) = t.as_array_mut() {
            list.push(json!({"Key": role, "Value": "1"}));
        }
        json!({"Type": "AWS::EC2::Subnet", "Properties": {
            "VpcId": {"Ref": "Vpc"}, "CidrBlock": cidr, "AvailabilityZone": az(i),
            "MapPublicIpOnLaunch": public, "Tags": t}})
    };
    let associate = |subnet: &str, table: &str| {
        json!({"Type": "AWS::EC2::SubnetRouteTableAssociation", "Properties": {
            "SubnetId": {"Ref": subnet}, "RouteTableId": {"Ref": table}}})
    };
    let (mut nodes, mut public, mut nat_addresses) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..zones {
        let name = format!("Subnet{i}");
        r.insert(
            name.clone(),
            subnet(format!("{}-{i}", ctx.cluster), &cidrs[i], i, !private),
        );
        nodes.push(json!({"Ref": name}));
        if !private {
            r.insert(
                format!("{name}RouteTableAssociation"),
                associate(&name, "PublicRouteTable"),
            );
            public.push(json!({"Ref": name}));
            continue;
        }
        let pub_name = format!("PublicSubnet{i}");
        r.insert(
            pub_name.clone(),
            subnet(format!("{}-public-{i}", ctx.cluster), &cidrs[zones + i], i, true),
        );
        r.insert(
            format!("{pub_name}RouteTableAssociation"),
            associate(&pub_name, "PublicRouteTable"),
        );
        public.push(json!({"Ref": pub_name}));
        // A private subnet's only way out is a NAT gateway: no route to the
        // internet gateway, no public IPs.
        let nat = match net.nat_gateways.unwrap_or_default() {
            NatGateways::PerZone => i,
            NatGateways::Single => 0,
        };
        if nat == i {
            nat_addresses.push(format!("NatAddress{i}"));
            r.insert(
                format!("NatAddress{i}"),
                json!({"Type": "AWS::EC2::EIP", "DependsOn": "GatewayAttachment",
                    "Properties": {"Domain": "vpc", "Tags": tags(ctx, &format!("{}-nat-{i}", ctx.cluster))}}),
            );
            r.insert(
                format!("NatGateway{i}"),
                json!({"Type": "AWS::EC2::NatGateway", "Properties": {
                    "SubnetId": {"Ref": pub_name},
                    "AllocationId": {"Fn::GetAtt": [format!("NatAddress{i}"), "AllocationId"]},
                    "Tags": tags(ctx, &format!("{}-nat-{i}", ctx.cluster))}}),
            );
        }
        let table = format!("PrivateRouteTable{i}");
        r.insert(
            table.clone(),
            json!({"Type": "AWS::EC2::RouteTable", "Properties": {
                "VpcId": {"Ref": "Vpc"}, "Tags": tags(ctx, &format!("{}-private-{i}", ctx.cluster))}}),
        );
        r.insert(
            format!("PrivateRoute{i}"),
            json!({"Type": "AWS::EC2::Route", "Properties": {
                "RouteTableId": {"Ref": table}, "DestinationCidrBlock": "0.0.0.0/0",
                "NatGatewayId": {"Ref": format!("NatGateway{nat}")}}}),
        );
        r.insert(format!("{name}RouteTableAssociation"), associate(&name, &table));
    }
    if private {
        // Node boot reads its cloud-config, the secret bundle and the charts
        // from S3: a gateway endpoint keeps that off the NAT gateways (and
        // their data charges) and working while they start.
        let tables: Vec<Value> = (0..zones)
            .map(|i| json!({"Ref": format!("PrivateRouteTable{i}")}))
            .collect();
        r.insert(
            "S3Endpoint".into(),
            json!({"Type": "AWS::EC2::VPCEndpoint", "Properties": {
                "VpcId": {"Ref": "Vpc"}, "VpcEndpointType": "Gateway",
                "ServiceName": {"Fn::Sub": "com.amazonaws.${AWS::Region}.s3"},
                "RouteTableIds": tables}}),
        );
    }
    Ok(NewSubnets {
        nodes,
        public,
        nat_addresses,
    })
}

/// What [`new_vpc_subnets`] made.
pub(super) struct NewSubnets {
    /// The node subnets (`Ref`s).
    pub(super) nodes: Vec<Value>,
    /// The public subnets (`Ref`s): the node subnets themselves without privateSubnets.
    pub(super) public: Vec<Value>,
    /// The NAT gateways' address (EIP) logical ids.
    pub(super) nat_addresses: Vec<String>,
}
