//! The diagnostics collector of the plugin stage: every check records its
//! located errors here and carries on, so one run reports every problem.

use crate::located::Located;

/// Errors found so far. [`Collector::take`] turns a `Result` into an
/// `Option`, recording the error, which replaces push-and-continue blocks.
#[derive(Debug, Default)]
pub struct Collector {
    errors: Vec<Located>,
}

/// One located error, or several.
pub trait IntoErrors {
    fn into_errors(self) -> Vec<Located>;
}

impl IntoErrors for Located {
    fn into_errors(self) -> Vec<Located> {
        vec![self]
    }
}

impl IntoErrors for Vec<Located> {
    fn into_errors(self) -> Vec<Located> {
        self
    }
}

impl Collector {
    /// The value of `r`, or None after recording its error(s).
    pub fn take<T, E: IntoErrors>(&mut self, r: Result<T, E>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                self.errors.extend(e.into_errors());
                None
            }
        }
    }

    pub fn push(&mut self, e: Located) {
        self.errors.push(e);
    }

    pub fn extend(&mut self, errors: impl IntoIterator<Item = Located>) {
        self.errors.extend(errors);
    }

    pub fn is_empty(&self) -> bool {
        self.errors.is_empty()
    }

    /// Everything recorded, in the order found.
    pub fn into_errors(self) -> Vec<Located> {
        self.errors
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn take_records_and_continues() {
        let mut c = Collector::default();
        let at = |m: &str| Located::new(std::path::Path::new("f"), Default::default(), "", m);
        assert_eq!(c.take(Ok::<_, Located>(1)), Some(1));
        assert_eq!(c.take(Err::<u8, _>(at("a"))), None);
        assert_eq!(c.take(Err::<u8, _>(vec![at("b"), at("c")])), None);
        let messages: Vec<String> = c.into_errors().into_iter().map(|e| e.message).collect();
        assert_eq!(messages, ["a", "b", "c"]);
    }
}
