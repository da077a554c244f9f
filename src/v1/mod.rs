//! V1 wire types: the envelope every V1 client receives (exactly `code`,
//! `message`, `data`), the integer run statuses and the application codes and
//! messages of the retired V1 service. A success's `data` is written by the
//! JSON kernel ([`Json`]).

pub(crate) mod answer;
pub mod route;

use serde::Serialize;
use serde_json::Value;

pub use v1compat_json::v1::Json;

/// The V1 envelope. `data` is always present, `null` on errors and on abort.
/// Successful answers carry their `data` already written as JSON.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Envelope<D = Value> {
    pub code: i64,
    pub message: String,
    pub data: D,
}

impl<D> Envelope<D> {
    pub fn success(data: D) -> Envelope<D> {
        Envelope {
            code: 0,
            message: "success".to_owned(),
            data,
        }
    }
}

impl Envelope {
    pub fn error(code: i64, message: impl Into<String>) -> Envelope {
        Envelope {
            code,
            message: message.into(),
            data: Value::Null,
        }
    }

    pub fn to_bytes(&self) -> bytes::Bytes {
        // Serialising a struct of strings, integers and a Value cannot fail.
        serde_json::to_vec(self).map(Into::into).unwrap_or_default()
    }
}

/// V1 application codes with the messages the V1 documentation gives them.
pub mod code {
    pub const INVALID_PARAMS: (i64, &str) = (4000, "Invalid request parameters");
    pub const NOT_FOUND: (i64, &str) = (4040, "Resource not found");
    pub const RATE_LIMITED: (i64, &str) = (4290, "Too many requests, please try again later");
    pub const INTERNAL: (i64, &str) = (5000, "Internal server error, please try again");
    pub const INVALID_KEY: (i64, &str) = (20001, "Invalid API key");
    pub const BALANCE: (i64, &str) = (30001, "Balance is not enough");
    pub const SCRIPT_NOT_FOUND: (i64, &str) = (50001, "Script does not exist");
    pub const SCRIPT_RUN_FAILED: (i64, &str) = (50002, "Script run failed");
    pub const VERSION_UNAVAILABLE: (i64, &str) = (50003, "The script version is not available");
    pub const TASK_NOT_FOUND: (i64, &str) = (60001, "Task does not exist");
    pub const RUN_NOT_FOUND: (i64, &str) = (70001, "Run record does not exist");
    pub const ABORT_FAILED: (i64, &str) = (70002, "Failed to abort run");
}

/// V1 integer run statuses (1 ready … 5 aborting).
pub mod status {
    pub const READY: i64 = 1;
    pub const RUNNING: i64 = 2;
    pub const SUCCEEDED: i64 = 3;
    pub const FAILED: i64 = 4;
    pub const ABORTING: i64 = 5;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_success_envelope_is_the_one_serde_writes() {
        let data = serde_json::json!({"a": [1, "x\u{e9}\"q"], "b": null});
        let json = Json::write(&data, 0).unwrap();
        assert_eq!(json.data_bytes(), serde_json::to_vec(&data).unwrap());
        let expect = serde_json::to_vec(&Envelope::success(&data)).unwrap();
        assert_eq!(
            serde_json::to_vec(&Envelope::success(&json)).unwrap(),
            expect
        );
        assert_eq!(json.clone().into_envelope().to_bytes(), expect);
        // Any other envelope carries the data as the JSON value it holds.
        let mut other = Envelope::error(7, "partly \"ok\"");
        other.data = serde_json::from_slice(&json.data_bytes()).unwrap();
        let expect = serde_json::to_vec(&Envelope {
            code: 7,
            message: other.message.clone(),
            data: &data,
        })
        .unwrap();
        assert_eq!(other.to_bytes(), expect);
    }

    #[test]
    fn an_envelope_around_a_shared_part_is_the_one_serde_writes() {
        use bytes::Bytes;
        use http_body_util::BodyExt;
        let rows = Bytes::from_static(br#"{"a":1},{"a":"x"}"#);
        let json = Json::write_around(
            4,
            |out| out.extend_from_slice(b"{\"list\":["),
            rows.clone(),
            |out| out.extend_from_slice(b"],\"n\":2}"),
        );
        let data = serde_json::json!({"list": [{"a": 1}, {"a": "x"}], "n": 2});
        assert_eq!(json.data_bytes(), serde_json::to_vec(&data).unwrap());
        let envelope = json.into_envelope();
        assert_eq!(
            envelope.to_bytes(),
            serde_json::to_vec(&Envelope::success(&data)).unwrap()
        );
        // Sent as three frames, the middle one the caller's buffer itself.
        let mut body = crate::v1::answer::AnswerBody::from(envelope);
        let mut frames = Vec::new();
        while let Some(frame) = futures_util::FutureExt::now_or_never(body.frame()).flatten() {
            frames.push(frame.unwrap().into_data().unwrap());
        }
        assert_eq!(frames.len(), 3);
        assert_eq!(frames[1].as_ptr(), rows.as_ptr());
    }
}
