//! CloudWatch DescribeAlarms (`status`'s etcd alarms), by hand: one signed
//! awsQuery POST and its XML answer, with the SigV4 signer and the XML reader
//! the SDK crates already build. aws-sdk-cloudwatch is not used: from 1.100
//! it speaks Smithy RPC v2 CBOR, which moto 5.2.5 cannot read, and pinning
//! the last awsQuery release rebuilds every SDK crate (over an hour cold).
//! CloudWatch still answers awsQuery (API reference, "Making API requests":
//! `Action=DescribeAlarms&Version=2010-08-01`, form-encoded POST, SigV4 with
//! the signing name `monitoring`).
//!
//! The endpoint is `AWS_ENDPOINT_URL_CLOUDWATCH` or `AWS_ENDPOINT_URL` (as
//! aws-config reads them for the SDK clients), else
//! `https://monitoring.<region>.amazonaws.com`.

use std::time::SystemTime;

use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
use aws_sigv4::sign::v4;
use aws_smithy_xml::decode::{try_data, Document, ScopedDecoder};

use crate::aws::AwsError;

const OPERATION: &str = "cloudwatch:DescribeAlarms";

/// One metric alarm as DescribeAlarms answers it (the fields `status` shows).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MetricAlarm {
    pub name: String,
    pub state: String,
    pub reason: String,
    /// StateUpdatedTimestamp as CloudWatch wrote it (ISO 8601).
    pub since: Option<String>,
}

/// A CloudWatch endpoint, the region and the credentials to sign with.
#[derive(Debug, Clone)]
pub struct CloudWatch {
    endpoint: String,
    region: String,
    credentials: SharedCredentialsProvider,
    http: reqwest::Client,
}

/// The endpoint for a region, the environment's first.
fn endpoint(region: &str) -> String {
    ["AWS_ENDPOINT_URL_CLOUDWATCH", "AWS_ENDPOINT_URL"]
        .iter()
        .filter(|_| std::env::var_os("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS").is_none_or(|v| v != "true"))
        .find_map(|k| std::env::var(k).ok().filter(|v| !v.is_empty()))
        .unwrap_or_else(|| {
            let suffix = if region.starts_with("cn-") {
                "amazonaws.com.cn"
            } else {
                "amazonaws.com"
            };
            format!("https://monitoring.{region}.{suffix}")
        })
}

/// `key=value&...`, form-encoded.
fn form(pairs: &[(&str, &str)]) -> String {
    url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .finish()
}

impl CloudWatch {
    pub fn new(region: &str, credentials: SharedCredentialsProvider) -> Self {
        CloudWatch {
            endpoint: endpoint(region),
            region: region.to_string(),
            credentials,
            http: reqwest::Client::builder()
                .timeout(std::time::Duration::from_secs(30))
                .build()
                .unwrap_or_default(),
        }
    }

    /// Every metric alarm whose name starts with `prefix`, by name.
    pub async fn describe_alarms(&self, prefix: &str) -> Result<Vec<MetricAlarm>, AwsError> {
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut pairs = vec![
                ("Action", "DescribeAlarms"),
                ("Version", "2010-08-01"),
                ("AlarmNamePrefix", prefix),
                ("AlarmTypes.member.1", "MetricAlarm"),
            ];
            if let Some(t) = &token {
                pairs.push(("NextToken", t));
            }
            let body = self.post(&form(&pairs)).await?;
            let (alarms, next) = parse_describe_alarms(&body).map_err(|detail| AwsError::Api {
                operation: OPERATION.into(),
                code: "UnreadableResponse".into(),
                message: detail,
            })?;
            out.extend(alarms);
            match next {
                Some(t) if !t.is_empty() => token = Some(t),
                _ => break,
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// One signed awsQuery POST; the body of a 2xx answer, else the error
    /// CloudWatch gave.
    async fn post(&self, body: &str) -> Result<String, AwsError> {
        let creds = self
            .credentials
            .provide_credentials()
            .await
            .map_err(|e| AwsError::NoCredentials { detail: e.to_string() })?;
        let identity = creds.into();
        let url = format!("{}/", self.endpoint.trim_end_matches('/'));
        let content_type = "application/x-www-form-urlencoded; charset=utf-8";
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.region)
            .name("monitoring")
            .time(SystemTime::now())
            .settings(SigningSettings::default())
            .build()
            .map_err(|e| api("Signing", e.to_string()))?
            .into();
        let signable = SignableRequest::new(
            "POST",
            url.as_str(),
            [("content-type", content_type)].into_iter(),
            SignableBody::Bytes(body.as_bytes()),
        )
        .map_err(|e| api("Signing", e.to_string()))?;
        let (instructions, _) = sign(signable, &params)
            .map_err(|e| api("Signing", e.to_string()))?
            .into_parts();
        let mut req = self
            .http
            .post(&url)
            .header("content-type", content_type)
            .body(body.to_string());
        for (name, value) in instructions.headers() {
            req = req.header(name, value);
        }
        let network = |e: reqwest::Error| AwsError::Network {
            operation: OPERATION.into(),
            detail: e.to_string(),
        };
        let resp = req.send().await.map_err(network)?;
        let status = resp.status();
        let text = resp.text().await.map_err(network)?;
        if status.is_success() {
            return Ok(text);
        }
        let (code, message) = parse_error(&text).unwrap_or_else(|| (format!("HTTP {status}"), text.clone()));
        if code == "Throttling" {
            return Err(AwsError::Throttled {
                operation: OPERATION.into(),
            });
        }
        Err(api(&code, message))
    }
}

fn api(code: &str, message: String) -> AwsError {
    AwsError::Api {
        operation: OPERATION.into(),
        code: code.into(),
        message,
    }
}

/// The text of a child element.
fn data(tag: &mut ScopedDecoder) -> Result<String, String> {
    try_data(tag).map(|c| c.into_owned()).map_err(|e| e.to_string())
}

/// An ISO 8601 time as RFC 3339 to the second (`2026-12-01T00:00:00Z`);
/// as given when it does not parse.
fn seconds(t: &str) -> String {
    humantime::parse_rfc3339_weak(t.trim_end_matches('Z'))
        .map(|at| humantime::format_rfc3339_seconds(at).to_string())
        .unwrap_or_else(|_| t.to_string())
}

/// `<DescribeAlarmsResponse><DescribeAlarmsResult><MetricAlarms><member>...`
/// and the `NextToken`.
pub fn parse_describe_alarms(xml: &str) -> Result<(Vec<MetricAlarm>, Option<String>), String> {
    let mut doc = Document::new(xml);
    let mut root = doc.root_element().map_err(|e| e.to_string())?;
    if !root.start_el().matches("DescribeAlarmsResponse") {
        return Err(format!(
            "expected DescribeAlarmsResponse, got <{}>",
            root.start_el().local()
        ));
    }
    let mut alarms = Vec::new();
    let mut next = None;
    while let Some(mut result) = root.next_tag() {
        if !result.start_el().matches("DescribeAlarmsResult") {
            continue;
        }
        while let Some(mut field) = result.next_tag() {
            if field.start_el().matches("NextToken") {
                next = Some(data(&mut field)?);
            } else if field.start_el().matches("MetricAlarms") {
                while let Some(mut member) = field.next_tag() {
                    let mut a = MetricAlarm::default();
                    while let Some(mut f) = member.next_tag() {
                        let name = f.start_el().local().to_string();
                        match name.as_str() {
                            "AlarmName" => a.name = data(&mut f)?,
                            "StateValue" => a.state = data(&mut f)?,
                            "StateReason" => a.reason = data(&mut f)?,
                            "StateUpdatedTimestamp" => {
                                a.since = Some(seconds(&data(&mut f)?)).filter(|s| !s.is_empty())
                            }
                            _ => {}
                        }
                    }
                    alarms.push(a);
                }
            }
        }
    }
    Ok((alarms, next))
}

/// `<ErrorResponse><Error><Code>..</Code><Message>..</Message>`.
fn parse_error(xml: &str) -> Option<(String, String)> {
    let mut doc = Document::new(xml);
    let mut root = doc.root_element().ok()?;
    while let Some(mut err) = root.next_tag() {
        if !err.start_el().matches("Error") {
            continue;
        }
        let (mut code, mut message) = (String::new(), String::new());
        while let Some(mut f) = err.next_tag() {
            if f.start_el().matches("Code") {
                code = data(&mut f).ok()?;
            } else if f.start_el().matches("Message") {
                message = data(&mut f).ok()?;
            }
        }
        return Some((code, message));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_alarms_the_token_and_errors() {
        // The shape of CloudWatch's awsQuery answer (API reference,
        // DescribeAlarms, "Response Elements"), trimmed.
        let xml = r#"<DescribeAlarmsResponse xmlns="http://monitoring.amazonaws.com/doc/2010-08-01/">
  <DescribeAlarmsResult>
    <MetricAlarms>
      <member>
        <AlarmName>kube-aws-demo-etcd-db-size</AlarmName>
        <Dimensions><member><Name>ClusterName</Name><Value>demo</Value></member></Dimensions>
        <StateValue>ALARM</StateValue>
        <StateReason>Threshold Crossed: 1 datapoint [12.0] &gt;= 10</StateReason>
        <StateUpdatedTimestamp>2026-12-01T00:00:00.000Z</StateUpdatedTimestamp>
      </member>
      <member>
        <AlarmName>kube-aws-demo-etcd-backup-age</AlarmName>
        <StateValue>OK</StateValue>
        <StateReason></StateReason>
      </member>
    </MetricAlarms>
    <CompositeAlarms/>
    <NextToken>abc</NextToken>
  </DescribeAlarmsResult>
  <ResponseMetadata><RequestId>1</RequestId></ResponseMetadata>
</DescribeAlarmsResponse>"#;
        let (alarms, next) = parse_describe_alarms(xml).unwrap();
        assert_eq!(next.as_deref(), Some("abc"));
        assert_eq!(alarms.len(), 2, "{alarms:?}");
        assert_eq!(alarms[0].name, "kube-aws-demo-etcd-db-size");
        assert_eq!(alarms[0].state, "ALARM");
        assert_eq!(alarms[0].reason, "Threshold Crossed: 1 datapoint [12.0] >= 10");
        assert_eq!(alarms[0].since.as_deref(), Some("2026-12-01T00:00:00Z"));
        assert_eq!(seconds("yesterday"), "yesterday");
        assert_eq!(seconds("2026-12-01T10:05:00.5Z"), "2026-12-01T10:05:00Z");
        assert_eq!((alarms[1].state.as_str(), alarms[1].since.as_deref()), ("OK", None));
        assert!(parse_describe_alarms("<Other/>").is_err());
        let e = r#"<ErrorResponse><Error><Type>Sender</Type><Code>AccessDenied</Code><Message>no</Message></Error></ErrorResponse>"#;
        assert_eq!(parse_error(e), Some(("AccessDenied".into(), "no".into())));
    }

    #[test]
    fn the_endpoint_follows_the_partition() {
        if std::env::var_os("AWS_ENDPOINT_URL").is_some() || std::env::var_os("AWS_ENDPOINT_URL_CLOUDWATCH").is_some() {
            return;
        }
        assert_eq!(endpoint("eu-west-1"), "https://monitoring.eu-west-1.amazonaws.com");
        assert_eq!(endpoint("cn-north-1"), "https://monitoring.cn-north-1.amazonaws.com.cn");
        assert_eq!(form(&[("A", "b c/")]), "A=b+c%2F");
    }
}
