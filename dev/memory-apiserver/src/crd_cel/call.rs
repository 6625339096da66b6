//! What the functions of the Kubernetes CEL libraries share: their arguments as values, and the error a call
//! reports (upstream's `no such overload` among them).

use cel::common::value::CowVal;
use cel::{ExecutionError, Value};

/// The arguments as `Value`s.
pub(super) fn values(args: &[CowVal<'_, '_>]) -> Result<Vec<Value>, ExecutionError> {
    args.iter().map(|a| Value::try_from(a.as_ref())).collect()
}

/// The error upstream's `types.MaybeNoSuchOverloadErr` gives (reported as a call that matched no overload).
pub(super) const NO_SUCH_OVERLOAD: &str = "no such overload";

/// An error of a Kubernetes library function.
pub(super) fn error(message: impl ToString) -> ExecutionError {
    ExecutionError::function_error("kubernetes", message)
}
