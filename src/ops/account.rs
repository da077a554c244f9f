//! Account: `POST /api/v1/account/info` (body `{}` or none) → `GET /api/v2/users/account`.
//!
//! | V1 | V2 | rule |
//! |---|---|---|
//! | `balance` (decimal string) | `balance` | a number is written as a string; `"0"` when absent |
//! | `traffic` | — (removed in V2) | `compat.account_traffic` (default 0) |
//! | `traffic_expiration_at` | `balance_expiration_at` | per `compat.traffic_expiration`: `balance_expiration_at` (default) or `zero` |
//!
//! V1↔V2 differences here (see `COMPATIBILITY.md`): [`account_traffic`](crate::differences::ACCOUNT_TRAFFIC), [`traffic_expiration`](crate::differences::TRAFFIC_EXPIRATION).

use serde_json::{json, Value};

use crate::error::{GatewayError, Subject};
use crate::ops::input::Body;
use crate::ops::Compat;
use crate::ops::{int_of, string_of, Exchange};
use crate::upstream::V2Call;
use crate::v2::{Part, V2Path};

pub(crate) fn v1_account(data: &Value, compat: &Compat) -> Value {
    let expiration = if compat.traffic_expiration_from_balance {
        int_of(data.get("balance_expiration_at")).unwrap_or(0)
    } else {
        0
    };
    json!({
        "balance": string_of(data.get("balance")).unwrap_or_else(|| "0".into()),
        "traffic": compat.account_traffic,
        "traffic_expiration_at": expiration,
    })
}

pub(crate) async fn account_info(
    ex: &Exchange<'_>,
    _body: &Body<'_>,
) -> Result<Value, GatewayError> {
    let path = V2Path::new(&[Part::Lit("users"), Part::Lit("account")]);
    let data = ex
        .call(V2Call::get(path).with_key(Some(ex.key()?)), Subject::Other)
        .await?;
    Ok(v1_account(&data, &ex.settings().compat))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traffic_fields_are_synthesised() {
        let mut c = Compat::default();
        let v2 = json!({"balance": "2.7129", "balance_expiration_at": 1812418930});
        assert_eq!(
            v1_account(&v2, &c),
            json!({"balance": "2.7129", "traffic": 0, "traffic_expiration_at": 1812418930})
        );
        c.traffic_expiration_from_balance = false;
        c.account_traffic = 5;
        assert_eq!(
            v1_account(&json!({"balance": 3}), &c),
            json!({"balance": "3", "traffic": 5, "traffic_expiration_at": 0})
        );
    }
}
