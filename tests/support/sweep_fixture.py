"""What a running cluster leaves in AWS outside its stacks, made on moto
for tests/it/destroy_sweep_moto.rs, as the components would make it:

- the AWS cloud controller manager, for a `type: LoadBalancer` Service: a
  network load balancer with a listener and a target group, and a classic
  ELB with its security group, all tagged kubernetes.io/cluster/<name>=owned
  (cloud-provider-aws pkg/providers/v1/aws_loadbalancer.go);
- the EBS CSI driver, for a PersistentVolumeClaim: a volume tagged the same
  way (k8sTagClusterId, plugins/aws-ebs-csi-driver);
- the VPC CNI: a detached ENI tagged cluster.k8s.amazonaws.com/name=<name>;
- external-dns (txtOwnerId = the cluster's name): an A record and its TXT
  registry records, old and new format, in the zone it was given (and
  another cluster's and a hand-made record there).

Plus what must survive: another cluster's volume, load balancer and DNS
record, an untagged volume, a hand-made DNS record; and, with `--in-use`,
a tagged volume attached to an instance outside the cluster.

Usage: python sweep_fixture.py CLUSTER ZONE_ID [--in-use]
Prints JSON: the IDs the test checks. Endpoint and credentials from the
environment (AWS_ENDPOINT_URL).

`python sweep_fixture.py --left CLUSTER` prints what is there afterwards:
everything still tagged with CLUSTER (by any of the tags the sweep reads),
every volume and load balancer ID, and every record "TYPE name" per zone.
"""

import json
import sys

import boto3

ec2 = boto3.client("ec2")
elbv2 = boto3.client("elbv2")
elb = boto3.client("elb")
r53 = boto3.client("route53")


def left(cluster):
    key = f"kubernetes.io/cluster/{cluster}"

    def tagged(tags):
        d = {t["Key"]: t["Value"] for t in tags or []}
        return d.get(key) == "owned" or d.get("cluster.k8s.amazonaws.com/name") == cluster

    found = []
    found += [v["VolumeId"] for v in ec2.describe_volumes()["Volumes"] if tagged(v.get("Tags"))]
    found += [g["GroupId"] for g in ec2.describe_security_groups()["SecurityGroups"] if tagged(g.get("Tags"))]
    found += [n["NetworkInterfaceId"] for n in ec2.describe_network_interfaces()["NetworkInterfaces"] if tagged(n.get("TagSet"))]
    arns = [lb["LoadBalancerArn"] for lb in elbv2.describe_load_balancers()["LoadBalancers"]]
    arns += [tg["TargetGroupArn"] for tg in elbv2.describe_target_groups()["TargetGroups"]]
    for d in elbv2.describe_tags(ResourceArns=arns)["TagDescriptions"] if arns else []:
        if tagged(d["Tags"]):
            found.append(d["ResourceArn"])
    names = [lb["LoadBalancerName"] for lb in elb.describe_load_balancers()["LoadBalancerDescriptions"]]
    for d in elb.describe_tags(LoadBalancerNames=names)["TagDescriptions"] if names else []:
        if tagged(d["Tags"]):
            found.append(d["LoadBalancerName"])
    records = {}
    for z in r53.list_hosted_zones()["HostedZones"]:
        sets = r53.list_resource_record_sets(HostedZoneId=z["Id"])["ResourceRecordSets"]
        records[z["Id"].split("/")[-1]] = sorted(f"{s['Type']} {s['Name']}" for s in sets)
    return {
        "tagged": sorted(found),
        "volumes": sorted(v["VolumeId"] for v in ec2.describe_volumes()["Volumes"]),
        "load_balancers": sorted(arns),
        "records": records,
    }


if sys.argv[1] == "--left":
    print(json.dumps(left(sys.argv[2])))
    sys.exit(0)

cluster, zone = sys.argv[1], sys.argv[2]
zone_name = r53.get_hosted_zone(Id=zone)["HostedZone"]["Name"]
in_use = "--in-use" in sys.argv[3:]

mine = [{"Key": f"kubernetes.io/cluster/{cluster}", "Value": "owned"}]
theirs = [{"Key": "kubernetes.io/cluster/other", "Value": "owned"}]


def spec(kind, tags):
    return [{"ResourceType": kind, "Tags": tags}]


vpc = ec2.create_vpc(CidrBlock="10.77.0.0/16")["Vpc"]["VpcId"]
subnets = [
    ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.77.{i}.0/24", AvailabilityZone=f"us-west-2{z}")["Subnet"]["SubnetId"]
    for i, z in ((1, "a"), (2, "b"))
]
out = {"vpc": vpc}

# The cloud controller's load balancers.
sg = ec2.create_security_group(
    GroupName=f"k8s-elb-a1b2c3", Description="Security group for Kubernetes ELB", VpcId=vpc,
    TagSpecifications=spec("security-group", mine),
)["GroupId"]
out["sg"] = sg
nlb = elbv2.create_load_balancer(Name="a1b2c3", Type="network", Subnets=subnets, Tags=mine)["LoadBalancers"][0]
out["nlb"] = nlb["LoadBalancerArn"]
tg = elbv2.create_target_group(
    Name="k8s-default-web-1", Protocol="TCP", Port=30080, VpcId=vpc, TargetType="instance", Tags=mine
)["TargetGroups"][0]["TargetGroupArn"]
out["tg"] = tg
elbv2.create_listener(
    LoadBalancerArn=out["nlb"], Protocol="TCP", Port=80, DefaultActions=[{"Type": "forward", "TargetGroupArn": tg}]
)
elb.create_load_balancer(
    LoadBalancerName="a4d5e6", Listeners=[{"Protocol": "TCP", "LoadBalancerPort": 80, "InstancePort": 30081}],
    Subnets=subnets, SecurityGroups=[sg], Tags=mine,
)
out["elb"] = "a4d5e6"

# A PersistentVolume's volume, a CNI ENI.
out["volume"] = ec2.create_volume(
    AvailabilityZone="us-west-2a", Size=10, TagSpecifications=spec("volume", mine + [{"Key": "Name", "Value": "pvc-1"}])
)["VolumeId"]
out["eni"] = ec2.create_network_interface(
    SubnetId=subnets[0], TagSpecifications=spec("network-interface", [{"Key": "cluster.k8s.amazonaws.com/name", "Value": cluster}])
)["NetworkInterface"]["NetworkInterfaceId"]

# What is not the cluster's.
out["other_volume"] = ec2.create_volume(
    AvailabilityZone="us-west-2a", Size=10, TagSpecifications=spec("volume", theirs)
)["VolumeId"]
out["shared_volume"] = ec2.create_volume(
    AvailabilityZone="us-west-2a", Size=10,
    TagSpecifications=spec("volume", [{"Key": f"kubernetes.io/cluster/{cluster}", "Value": "shared"}]),
)["VolumeId"]
out["untagged_volume"] = ec2.create_volume(AvailabilityZone="us-west-2a", Size=10)["VolumeId"]
out["other_nlb"] = elbv2.create_load_balancer(Name="other-lb", Type="network", Subnets=subnets, Tags=theirs)[
    "LoadBalancers"
][0]["LoadBalancerArn"]

# external-dns's records.


def txt(owner, resource):
    return f'"heritage=external-dns,external-dns/owner={owner},external-dns/resource={resource}"'


def upsert(name, rtype, value):
    return {
        "Action": "UPSERT",
        "ResourceRecordSet": {"Name": name, "Type": rtype, "TTL": 300, "ResourceRecords": [{"Value": value}]},
    }


r53.change_resource_record_sets(
    HostedZoneId=zone,
    ChangeBatch={
        "Changes": [
            upsert(f"web.{zone_name}", "CNAME", nlb["DNSName"]),
            upsert(f"web.{zone_name}", "TXT", txt(cluster, "service/default/web")),
            upsert(f"cname-web.{zone_name}", "TXT", txt(cluster, "service/default/web")),
            upsert(f"db.{zone_name}", "A", "10.77.1.9"),
            upsert(f"a-db.{zone_name}", "TXT", txt("other", "service/default/db")),
            upsert(f"manual.{zone_name}", "A", "10.77.1.10"),
        ]
    },
)

if in_use:
    # A tagged volume that something outside the cluster holds.
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    instance = ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1, SubnetId=subnets[0])["Instances"][0]["InstanceId"]
    out["held_volume"] = ec2.create_volume(AvailabilityZone="us-west-2a", Size=10, TagSpecifications=spec("volume", mine))[
        "VolumeId"
    ]
    ec2.attach_volume(VolumeId=out["held_volume"], InstanceId=instance, Device="/dev/sdf")
    out["instance"] = instance

print(json.dumps(out))
