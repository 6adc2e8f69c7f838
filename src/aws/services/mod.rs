//! The AWS service wrappers the rooms above share: CloudFormation stacks and
//! change sets (`stack`), S3 objects (`s3`), CloudWatch alarms (`cloudwatch`),
//! S3 lifecycle rules (`retention`).

pub mod cloudwatch;
pub mod retention;
pub mod s3;
pub mod stack;
