//! The bounded parser against redis-rs's own (`redis::parse_redis_value`): equal on every
//! value it accepts, and never past its limits.

use proptest::prelude::*;
use redis_wire::{Limits, Value, WireError, read_value};

/// redis-rs's value in this crate's terms (`None`: a type RESP2 has not).
fn from_reference(v: redis::Value) -> Option<Value> {
    Some(match v {
        redis::Value::Nil => Value::Nil,
        redis::Value::Int(i) => Value::Int(i),
        redis::Value::Okay => Value::SimpleString("OK".into()),
        redis::Value::SimpleString(s) => Value::SimpleString(s),
        redis::Value::BulkString(b) => Value::BulkString(b),
        redis::Value::Array(items) => Value::Array(
            items
                .into_iter()
                .map(from_reference)
                .collect::<Option<Vec<_>>>()?,
        ),
        redis::Value::ServerError(e) => Value::Error(match e.details() {
            Some(d) => format!("{} {d}", e.code()),
            None => e.code().to_owned(),
        }),
        _ => return None,
    })
}

fn encode(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::Nil => out.extend_from_slice(b"$-1\r\n"),
        Value::Int(i) => out.extend_from_slice(format!(":{i}\r\n").as_bytes()),
        Value::SimpleString(s) => out.extend_from_slice(format!("+{s}\r\n").as_bytes()),
        Value::Error(s) => out.extend_from_slice(format!("-{s}\r\n").as_bytes()),
        Value::BulkString(b) => {
            out.extend_from_slice(format!("${}\r\n", b.len()).as_bytes());
            out.extend_from_slice(b);
            out.extend_from_slice(b"\r\n");
        }
        Value::Array(items) => {
            out.extend_from_slice(format!("*{}\r\n", items.len()).as_bytes());
            for i in items {
                encode(i, out);
            }
        }
    }
}

/// A status line: any characters but CR and LF (any UTF-8, so multi-byte ones too).
fn line() -> impl Strategy<Value = String> {
    "[^\r\n]{0,20}"
}

/// An error line as servers send them: a code word, maybe details.
fn error_line() -> impl Strategy<Value = String> {
    ("[A-Z]{1,8}", proptest::option::of("[^\r\n]{1,12}"))
        .prop_map(|(code, d)| d.map_or(code.clone(), |d| format!("{code} {d}")))
}

fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Nil),
        any::<i64>().prop_map(Value::Int),
        line().prop_map(Value::SimpleString),
        error_line().prop_map(Value::Error),
        // Every byte value, CR and LF included.
        proptest::collection::vec(any::<u8>(), 0..40).prop_map(Value::BulkString),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        proptest::collection::vec(inner, 0..6).prop_map(Value::Array)
    })
}

fn roomy() -> Limits {
    Limits::for_values_up_to(1 << 16)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Every valid encoding reads back to its value, as redis-rs reads it.
    #[test]
    fn equal_to_redis_rs_on_valid_replies(v in value()) {
        let mut bytes = Vec::new();
        encode(&v, &mut bytes);
        let ours = read_value(&mut bytes.as_slice(), &roomy()).expect("valid");
        prop_assert_eq!(&ours, &v);
        let reference = redis::parse_redis_value(&bytes).expect("reference parses");
        prop_assert_eq!(from_reference(reference), Some(ours));
    }

    /// On any bytes (every byte class: random, and valid replies with one byte changed or cut
    /// short), whatever this parser accepts redis-rs accepts as the same value.
    #[test]
    fn accepts_nothing_redis_rs_reads_otherwise(
        v in value(),
        edit in proptest::option::of((any::<prop::sample::Index>(), any::<u8>())),
        cut in proptest::option::of(any::<prop::sample::Index>()),
        noise in proptest::collection::vec(any::<u8>(), 0..24),
        use_noise in any::<bool>(),
    ) {
        let mut bytes = Vec::new();
        if use_noise {
            bytes = noise;
        } else {
            encode(&v, &mut bytes);
            if let Some((i, b)) = edit {
                let i = i.index(bytes.len());
                bytes[i] = b;
            }
            if let Some(c) = cut {
                bytes.truncate(c.index(bytes.len()));
            }
        }
        if let Ok(ours) = read_value(&mut bytes.as_slice(), &roomy()) {
            let reference = redis::parse_redis_value(&bytes);
            prop_assert!(reference.is_ok(), "{:?}: ours {:?}, reference {:?}", bytes, ours, reference);
            prop_assert_eq!(from_reference(reference.expect("ok")), Some(ours));
        }
    }

    /// A reply past any limit is refused, within the limits.
    #[test]
    fn limits_refuse(v in value(), max_bulk in 0usize..40, max_elements in 0usize..12, max_depth in 0usize..4, max_total in 0usize..400) {
        let limits = Limits { max_bulk, max_elements, max_depth, max_line: 64, max_total };
        let mut bytes = Vec::new();
        encode(&v, &mut bytes);
        match read_value(&mut bytes.as_slice(), &limits) {
            Ok(ours) => {
                prop_assert_eq!(&ours, &v);
                let (bulk, elements, depth) = measure(&ours);
                prop_assert!(bulk <= max_bulk && elements <= max_elements && depth <= max_depth);
            }
            Err(e) => prop_assert!(matches!(e, WireError::Limit(_)), "{:?}", e),
        }
    }
}

/// (longest bulk, elements in all, depth) of a value.
fn measure(v: &Value) -> (usize, usize, usize) {
    match v {
        Value::BulkString(b) => (b.len(), 0, 0),
        Value::Array(items) => items
            .iter()
            .map(measure)
            .fold((0, items.len(), 1), |(b, e, d), (b2, e2, d2)| {
                (b.max(b2), e + e2, d.max(d2 + 1))
            }),
        _ => (0, 0, 0),
    }
}

#[test]
fn announced_sizes_are_refused_before_allocation() {
    let limits = Limits::default();
    for (bytes, what) in [
        (&b"$4000000000\r\n"[..], "bulk"),
        (b"*2000000000\r\n", "array"),
        (b"$9223372036854775807\r\n", "bulk"),
    ] {
        let e = read_value(&mut &bytes[..], &limits).expect_err(what);
        assert!(matches!(e, WireError::Limit(_)), "{what}: {e:?}");
    }
    let deep = b"*1\r\n".repeat(100_000);
    assert!(matches!(
        read_value(&mut deep.as_slice(), &limits),
        Err(WireError::Limit(_))
    ));
    let long = [b"+".as_slice(), &vec![b'a'; 1 << 20]].concat();
    assert!(matches!(
        read_value(&mut long.as_slice(), &limits),
        Err(WireError::Limit(_))
    ));
    for bad in [
        &b"$-2\r\n"[..],
        b":1x\r\n",
        b"_\r\n",
        b"%1\r\n",
        b":\r\n",
        b"+a\n",
    ] {
        assert!(read_value(&mut &bad[..], &limits).is_err(), "{bad:?}");
    }
}
