//! `iceberg_require(condition, message)`: TRUE for every row whose condition is TRUE; a row
//! whose condition is FALSE or NULL fails the statement with `message`. An overwrite by filter
//! puts it in a filter below its writer, so a row written outside the filter stops the
//! statement before anything commits. A plan that calls it travels by the function's name.

use std::sync::{Arc, LazyLock};

use arrow::array::{Array, AsArray, BooleanArray};
use arrow::datatypes::DataType;
use datafusion::common::ScalarValue;
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature,
    Volatility,
};

/// The function (one instance, so plans compare equal).
pub fn iceberg_require() -> Arc<ScalarUDF> {
    static UDF: LazyLock<Arc<ScalarUDF>> =
        LazyLock::new(|| Arc::new(ScalarUDF::new_from_impl(Require::new())));
    Arc::clone(&UDF)
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Require {
    signature: Signature,
}

impl Require {
    fn new() -> Self {
        Self {
            // Volatile: the check is never folded away, moved or pruned with.
            signature: Signature::new(
                TypeSignature::Exact(vec![DataType::Boolean, DataType::Utf8]),
                Volatility::Volatile,
            ),
        }
    }
}

/// The message argument, a constant.
fn message(arg: &ColumnarValue) -> Result<String> {
    match arg {
        ColumnarValue::Scalar(ScalarValue::Utf8(Some(m))) => Ok(m.clone()),
        _ => Err(DataFusionError::Plan(
            "iceberg_require: the message must be a constant string".into(),
        )),
    }
}

impl ScalarUDFImpl for Require {
    fn name(&self) -> &str {
        "iceberg_require"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Boolean)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [condition, text] = args.args.as_slice() else {
            return Err(DataFusionError::Plan(
                "iceberg_require takes two arguments: (condition, message)".into(),
            ));
        };
        let text = message(text)?;
        let holds = match condition {
            ColumnarValue::Scalar(ScalarValue::Boolean(Some(true))) => true,
            ColumnarValue::Scalar(_) => args.number_rows == 0,
            ColumnarValue::Array(a) => {
                let values = a.as_boolean();
                values.null_count() == 0 && values.true_count() == values.len()
            }
        };
        if !holds {
            return Err(DataFusionError::Execution(text));
        }
        Ok(ColumnarValue::Array(Arc::new(BooleanArray::from(vec![
            true;
            args.number_rows
        ]))))
    }
}

#[cfg(test)]
mod tests {
    use arrow::datatypes::Field;
    use datafusion::config::ConfigOptions;

    use super::*;

    fn run(values: Vec<Option<bool>>) -> Result<ColumnarValue> {
        let rows = values.len();
        let args = ScalarFunctionArgs {
            args: vec![
                ColumnarValue::Array(Arc::new(BooleanArray::from(values))),
                ColumnarValue::Scalar(ScalarValue::Utf8(Some("outside".into()))),
            ],
            arg_fields: vec![
                Arc::new(Field::new("c", DataType::Boolean, true)),
                Arc::new(Field::new("m", DataType::Utf8, false)),
            ],
            number_rows: rows,
            return_field: Arc::new(Field::new("r", DataType::Boolean, false)),
            config_options: Arc::new(ConfigOptions::default()),
        };
        iceberg_require().invoke_with_args(args)
    }

    #[test]
    fn true_rows_pass_and_false_or_null_rows_fail_with_the_message() {
        let ok = run(vec![Some(true), Some(true)]).unwrap();
        let ColumnarValue::Array(a) = ok else {
            panic!("an array")
        };
        assert_eq!(a.as_boolean().true_count(), 2);
        for bad in [vec![Some(true), Some(false)], vec![None, Some(true)]] {
            let e = run(bad).unwrap_err().to_string();
            assert!(e.contains("outside"), "{e}");
        }
        assert!(run(vec![]).is_ok());
    }
}
