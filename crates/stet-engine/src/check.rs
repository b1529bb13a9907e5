//! One finding of `stet doctor`: what was checked, how it came out and what to do about it. Its own
//! module so the forges and credential providers can report on themselves without knowing the doctor.

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// It passed.
    Ok,
    /// It found something worth fixing that does not stop dispatches.
    Warn,
    /// It failed: dispatches will not work until it is fixed.
    Fail,
}

/// One check's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// What was checked (`docker`, `disk`, `sandbox user`, ...).
    pub name: &'static str,
    /// How it came out.
    pub status: Status,
    /// What the check found, in one line.
    pub detail: String,
    /// What a person should do, when the check did not pass.
    pub fix: Option<String>,
}

impl Check {
    pub(crate) fn ok(name: &'static str, detail: String) -> Check {
        Check {
            name,
            status: Status::Ok,
            detail,
            fix: None,
        }
    }

    pub(crate) fn problem(name: &'static str, status: Status, detail: String, fix: &str) -> Check {
        Check {
            name,
            status,
            detail,
            fix: Some(fix.to_owned()),
        }
    }
}
