//! One line for an error and its sources, for the texts that reach a person, a log or an event:
//! hyper's and rustls' errors say little at the top ("client error (Connect)") and the useful part
//! in their causes. The forge's REST client and the model gateway both speak of errors this way.

/// `err` and its sources joined with `: `, leaving out a cause whose text the line already holds:
/// `client error (Connect): tcp connect error: Connection refused`.
pub(crate) fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Layer {
        text: &'static str,
        cause: Option<Box<Layer>>,
    }

    impl std::fmt::Display for Layer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.text)
        }
    }

    impl std::error::Error for Layer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.cause
                .as_deref()
                .map(|cause| cause as &(dyn std::error::Error + 'static))
        }
    }

    fn chain(texts: &[&'static str]) -> Layer {
        texts
            .iter()
            .rev()
            .fold(None, |cause, text| {
                Some(Layer {
                    text,
                    cause: cause.map(Box::new),
                })
            })
            .unwrap()
    }

    #[test]
    fn every_cause_is_joined_in_order() {
        let err = chain(&[
            "client error (Connect)",
            "tcp connect error",
            "Connection refused",
        ]);
        assert_eq!(
            error_chain(&err),
            "client error (Connect): tcp connect error: Connection refused"
        );
    }

    #[test]
    fn a_cause_the_line_already_says_is_not_repeated() {
        let err = chain(&["reading the body: connection reset", "connection reset"]);
        assert_eq!(error_chain(&err), "reading the body: connection reset");
        assert_eq!(error_chain(&chain(&["alone"])), "alone");
    }
}
