//! The SDK configuration: the standard credential chain (environment, profiles,
//! SSO, IMDS) with `--profile` and `--region` overrides; `AWS_ENDPOINT_URL` and
//! the per-service `AWS_ENDPOINT_URL_<SERVICE>` variables (read by aws-config),
//! so the same binary runs against moto or LocalStack; path-style S3 whenever an
//! endpoint is set. TLS is rustls with the ring provider.

use aws_config::BehaviorVersion;
use aws_sdk_s3::config::ProvideCredentials;
use aws_smithy_http_client::tls;

use super::AwsError;

/// Choices from the command line.
#[derive(Debug, Clone, Default)]
pub struct AwsOptions {
    /// A profile from ~/.aws/config; else AWS_PROFILE or "default".
    pub profile: Option<String>,
    /// Overrides the cluster's region from cluster.yaml.
    pub region: Option<String>,
}

/// The clients, and where S3 objects are reachable over HTTP.
#[derive(Debug, Clone)]
pub struct Clients {
    pub cfn: aws_sdk_cloudformation::Client,
    pub s3: aws_sdk_s3::Client,
    /// The account's S3 Block Public Access (src/aws/publish/issuer.rs).
    pub s3control: aws_sdk_s3control::Client,
    pub kms: aws_sdk_kms::Client,
    #[cfg(feature = "nodes")]
    pub ec2: aws_sdk_ec2::Client,
    /// `destroy`'s sweep (src/aws/lifecycle/sweep/calls.rs): both load balancer APIs and Route53.
    #[cfg(feature = "nodes")]
    pub elbv2: aws_sdk_elasticloadbalancingv2::Client,
    #[cfg(feature = "nodes")]
    pub elb: aws_sdk_elasticloadbalancing::Client,
    #[cfg(feature = "nodes")]
    pub route53: aws_sdk_route53::Client,
    /// `status`'s etcd alarms (src/aws/state/etcd_status.rs): DescribeAlarms by
    /// hand (src/aws/services/cloudwatch.rs).
    pub cloudwatch: crate::aws::services::cloudwatch::CloudWatch,
    /// Resolves the AMI public parameters (`up`, `update --refresh-ami`).
    pub ssm: aws_sdk_ssm::Client,
    pub region: String,
    /// The S3 endpoint when one is set (moto, LocalStack); None for AWS itself.
    pub s3_endpoint: Option<String>,
}

impl Clients {
    /// The HTTPS URL of an S3 object, as CloudFormation's TemplateURL wants it.
    pub fn object_url(&self, bucket: &str, key: &str) -> String {
        object_url(self.s3_endpoint.as_deref(), &self.region, bucket, key)
    }
}

/// The URL of an object: path-style under a custom endpoint, else virtual-hosted AWS.
pub fn object_url(endpoint: Option<&str>, region: &str, bucket: &str, key: &str) -> String {
    match endpoint {
        Some(e) => format!("{}/{bucket}/{key}", e.trim_end_matches('/')),
        None => {
            let suffix = if region.starts_with("cn-") {
                "amazonaws.com.cn"
            } else {
                "amazonaws.com"
            };
            format!("https://{bucket}.s3.{region}.{suffix}/{key}")
        }
    }
}

/// The S3 endpoint set through the environment, per-service variable first.
fn env_s3_endpoint() -> Option<String> {
    ["AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"]
        .iter()
        .filter(|_| std::env::var_os("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS").is_none_or(|v| v != "true"))
        .find_map(|k| std::env::var(k).ok().filter(|v| !v.is_empty()))
}

/// An endpoint resolver that answers one URL.
#[derive(Debug)]
struct FixedEndpoint(String);

impl aws_sdk_s3control::config::endpoint::ResolveEndpoint for FixedEndpoint {
    fn resolve_endpoint<'a>(
        &'a self,
        _params: &'a aws_sdk_s3control::config::endpoint::Params,
    ) -> aws_sdk_s3control::config::endpoint::EndpointFuture<'a> {
        aws_sdk_s3control::config::endpoint::EndpointFuture::ready(Ok(
            aws_sdk_s3control::config::endpoint::Endpoint::builder()
                .url(self.0.clone())
                .build(),
        ))
    }
}

/// Builds the clients and checks that credentials resolve, so a missing
/// credential is reported once, plainly, before any call.
pub async fn connect(opts: &AwsOptions, cluster_region: &str) -> Result<Clients, AwsError> {
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(tls::rustls_provider::CryptoMode::Ring))
        .build_https();
    let region = opts.region.clone().unwrap_or_else(|| cluster_region.to_string());
    let mut loader = aws_config::defaults(BehaviorVersion::latest())
        .http_client(http)
        .region(aws_sdk_s3::config::Region::new(region.clone()));
    if let Some(p) = &opts.profile {
        loader = loader.profile_name(p);
    }
    let sdk = loader.load().await;

    let provider = sdk.credentials_provider().ok_or_else(|| AwsError::NoCredentials {
        detail: "no credential provider is configured".into(),
    })?;
    if let Err(e) = provider.provide_credentials().await {
        return Err(AwsError::NoCredentials {
            detail: aws_sdk_s3::error::DisplayErrorContext(&e).to_string(),
        });
    }

    let s3_endpoint = env_s3_endpoint().or_else(|| sdk.endpoint_url().map(str::to_string));
    let s3_conf = aws_sdk_s3::config::Builder::from(&sdk)
        .force_path_style(s3_endpoint.is_some())
        .build();
    let mut s3control_conf = aws_sdk_s3control::config::Builder::from(&sdk);
    if let Some(e) = &s3_endpoint {
        // S3 Control's endpoint rules put the account ID in front of the
        // host (`<account>.s3-control.<region>.amazonaws.com`); under a custom
        // endpoint (moto, LocalStack) that name does not resolve, and the
        // request goes to the endpoint as it is.
        s3control_conf = s3control_conf.endpoint_resolver(FixedEndpoint(e.clone()));
    }
    Ok(Clients {
        cfn: aws_sdk_cloudformation::Client::new(&sdk),
        s3: aws_sdk_s3::Client::from_conf(s3_conf),
        s3control: aws_sdk_s3control::Client::from_conf(s3control_conf.build()),
        kms: aws_sdk_kms::Client::new(&sdk),
        #[cfg(feature = "nodes")]
        ec2: aws_sdk_ec2::Client::new(&sdk),
        #[cfg(feature = "nodes")]
        elbv2: aws_sdk_elasticloadbalancingv2::Client::new(&sdk),
        #[cfg(feature = "nodes")]
        elb: aws_sdk_elasticloadbalancing::Client::new(&sdk),
        #[cfg(feature = "nodes")]
        route53: aws_sdk_route53::Client::new(&sdk),
        cloudwatch: crate::aws::services::cloudwatch::CloudWatch::new(&region, provider.clone()),
        ssm: aws_sdk_ssm::Client::new(&sdk),
        region,
        s3_endpoint,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_urls_are_path_style_under_an_endpoint() {
        assert_eq!(
            object_url(
                Some("http://localhost:5000/"),
                "us-west-2",
                "b",
                "p/demo/stacks/x/root.json"
            ),
            "http://localhost:5000/b/p/demo/stacks/x/root.json"
        );
        assert_eq!(
            object_url(None, "us-west-2", "b", "k.json"),
            "https://b.s3.us-west-2.amazonaws.com/k.json"
        );
        assert_eq!(
            object_url(None, "cn-north-1", "b", "k"),
            "https://b.s3.cn-north-1.amazonaws.com.cn/k"
        );
    }
}
