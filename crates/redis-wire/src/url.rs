//! The Redis URL forms both levels accept, parsed here rather than by redis-rs (whose `url`
//! dependency builds the whole ICU stack for international host names this crate never
//! needs), and a script's SHA-1.
//!
//! The forms accepted (and nothing else: [`WireError::Url`]) are listed in the crate docs'
//! "URLs" section. Every URL accepted here, redis-rs 1.8 (`IntoConnectionInfo`) accepts too
//! and reads as the same address, user, password and database: the property tests below
//! hold the two equal over generated URLs.

use std::net::Ipv6Addr;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;

use sha1::{Digest, Sha1};

use crate::{Addr, WireError};

/// Redis's default port.
const DEFAULT_PORT: u16 = 6379;

/// What a URL names: the address, the login, the database.
pub(crate) struct Parsed {
    pub(crate) addr: Addr,
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
    pub(crate) db: i64,
}

fn bad(url: &str, why: &str) -> WireError {
    // The URL may hold a password: it is never echoed.
    let scheme = url.split_once("://").map_or("", |(s, _)| s);
    WireError::Url(format!("a {scheme}:// URL: {why}"))
}

/// Parses one of the forms in the module docs.
pub(crate) fn parse(url: &str) -> Result<Parsed, WireError> {
    if url
        .bytes()
        .any(|b| b.is_ascii_control() || b == b' ' || !b.is_ascii())
    {
        return Err(WireError::Url(
            "a Redis URL of printable ASCII without spaces (percent-encode the rest)".into(),
        ));
    }
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(WireError::Url(
            "not a Redis URL (redis://host:port/db or unix:///path)".into(),
        ));
    };
    match scheme.to_ascii_lowercase().as_str() {
        "redis" | "valkey" => tcp(url, rest),
        "unix" | "redis+unix" | "valkey+unix" => unix(url, rest),
        "rediss" | "valkeys" => Err(bad(url, "TLS is not supported")),
        _ => Err(WireError::Url(
            "not a Redis URL (redis://host:port/db or unix:///path)".into(),
        )),
    }
}

/// `rest` (after `://`) split into authority, path, query: the authority ends at the first
/// `/`, `?` or `#`; the fragment is dropped.
fn split(rest: &str) -> (&str, &str, &str) {
    let rest = rest.split_once('#').map_or(rest, |(r, _)| r);
    let (before, query) = rest.split_once('?').unwrap_or((rest, ""));
    let end = before.find('/').unwrap_or(before.len());
    let (authority, path) = before.split_at(end);
    (authority, path, query)
}

fn tcp(url: &str, rest: &str) -> Result<Parsed, WireError> {
    let (authority, path, query) = split(rest);
    let (userinfo, hostport) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    let (username, password) = match userinfo {
        None => (None, None),
        Some(u) => {
            let (user, pass) = u.split_once(':').unwrap_or((u, ""));
            (
                non_empty(percent_decode(user).ok_or_else(|| bad(url, "a user of UTF-8"))?),
                non_empty(percent_decode(pass).ok_or_else(|| bad(url, "a password of UTF-8"))?),
            )
        }
    };
    let (host, port) = host_port(hostport).ok_or_else(|| bad(url, "a host and a port"))?;
    if host == "0.0.0.0" || host == "::" {
        return Err(bad(url, "a wildcard address (0.0.0.0 or ::) is no server"));
    }
    let db = path.trim_matches('/');
    let db = if db.is_empty() {
        0
    } else if db.bytes().all(|b| b.is_ascii_digit()) {
        db.parse()
            .map_err(|_| bad(url, "a database number in range"))?
    } else {
        return Err(bad(url, "a database number after the host (`/0`)"));
    };
    let pairs = query_pairs(query).ok_or_else(|| bad(url, "a query of UTF-8"))?;
    check_protocol(url, &pairs)?;
    Ok(Parsed {
        addr: Addr::Tcp(host, port),
        username,
        password,
        db,
    })
}

/// `host[:port]` or `[v6][:port]`.
fn host_port(s: &str) -> Option<(String, u16)> {
    let (host, port) = if let Some(inner) = s.strip_prefix('[') {
        let (v6, after) = inner.split_once(']')?;
        let v6: Ipv6Addr = v6.parse().ok()?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':')?),
        };
        (v6.to_string(), port)
    } else {
        let (host, port) = match s.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (s, None),
        };
        let allowed = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b'~');
        if host.is_empty() || !host.bytes().all(allowed) {
            return None;
        }
        (host.to_owned(), port)
    };
    let port = match port {
        None | Some("") => DEFAULT_PORT,
        Some(p) if p.bytes().all(|b| b.is_ascii_digit()) => p.parse().ok()?,
        Some(_) => return None,
    };
    Some((host, port))
}

fn unix(url: &str, rest: &str) -> Result<Parsed, WireError> {
    let (authority, path, query) = split(rest);
    if !(authority.is_empty() || authority.eq_ignore_ascii_case("localhost")) {
        return Err(bad(url, "no host but localhost (unix:///path/to/socket)"));
    }
    // A segment that decodes to `.` or `..` (`%2e`, `.%2E`, ...) is a dot segment to URL
    // libraries too, which drop it or its parent: refused, never read another way.
    let dot_segment = |seg: &str| matches!(percent_decode_bytes(seg).as_slice(), b"." | b"..");
    if path.is_empty() || path.split('/').any(dot_segment) {
        return Err(bad(url, "the socket's absolute path, without . or .."));
    }
    let decoded = percent_decode_bytes(path);
    // A segment like `c:` or `c|` (first or not) is a Windows drive letter to URL libraries
    // (redis-rs reads `/c:` as `/c:/`, and `/x/a%3A` as `/x/a:/`): refused rather than read
    // another way.
    let drive_letter =
        |seg: &[u8]| matches!(seg, [letter, b':' | b'|'] if letter.is_ascii_alphabetic());
    // And a path ending in a letter and `:` or `|` gets a `/` appended by them (`/aA|` reads
    // `/aA|/`).
    let drive_end =
        matches!(decoded.as_slice(), [.., letter, b':' | b'|'] if letter.is_ascii_alphabetic());
    if drive_end || decoded.split(|&b| b == b'/').any(drive_letter) {
        return Err(bad(
            url,
            "a socket path not starting with a drive letter (`/c:`)",
        ));
    }
    let path = PathBuf::from(std::ffi::OsString::from_vec(decoded));
    let pairs = query_pairs(query).ok_or_else(|| bad(url, "a query of UTF-8"))?;
    check_protocol(url, &pairs)?;
    let last = |key: &str| {
        pairs
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
    };
    let db = match last("db") {
        None => 0,
        Some(d) if !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()) => d
            .parse()
            .map_err(|_| bad(url, "a database number in range"))?,
        Some(_) => return Err(bad(url, "a database number (`?db=0`)")),
    };
    Ok(Parsed {
        addr: Addr::Unix(path),
        username: last("user"),
        password: last("pass"),
        db,
    })
}

/// The last `protocol` given must be one redis-rs reads.
fn check_protocol(url: &str, pairs: &[(String, String)]) -> Result<(), WireError> {
    match pairs.iter().rev().find(|(k, _)| k == "protocol") {
        None => Ok(()),
        Some((_, p)) if matches!(p.as_str(), "2" | "resp2" | "3" | "resp3") => Ok(()),
        Some(_) => Err(bad(url, "protocol 2, resp2, 3 or resp3")),
    }
}

fn non_empty(s: String) -> Option<String> {
    (!s.is_empty()).then_some(s)
}

fn hex_digit(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// `%XX` decoded; a `%` not followed by two hex digits stays as it is (as URL decoders do).
fn percent_decode_bytes(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && let (Some(h), Some(l)) = (
                b.get(i + 1).copied().and_then(hex_digit),
                b.get(i + 2).copied().and_then(hex_digit),
            )
        {
            out.push(h * 16 + l);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

fn percent_decode(s: &str) -> Option<String> {
    String::from_utf8(percent_decode_bytes(s)).ok()
}

/// `application/x-www-form-urlencoded` pairs: `&`-separated, `key=value` (no `=`: an empty
/// value), `+` a space, then percent-decoded; empty pieces skipped.
fn query_pairs(query: &str) -> Option<Vec<(String, String)>> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            let decode = |s: &str| percent_decode(&s.replace('+', " "));
            Some((decode(k)?, decode(v)?))
        })
        .collect()
}

/// The SHA-1 of a script's source, as 40 lowercase hex digits (what `EVALSHA` names it by).
pub(crate) fn script_sha1(source: &str) -> String {
    hex::encode(Sha1::digest(source.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn script_sha1_is_the_sha1_redis_names_a_script_by() {
        // `redis-cli SCRIPT LOAD "return 1"` answers this digest.
        assert_eq!(
            script_sha1("return 1"),
            "e0e1f9fabfc9d4800c877a703b823ac0578ff8db"
        );
        assert_eq!(script_sha1(""), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
    }

    #[test]
    fn forms() {
        let p = parse("redis://u%40x:p%3Aw@127.0.0.1:6390/3").expect("parses");
        assert!(matches!(&p.addr, Addr::Tcp(h, 6390) if h == "127.0.0.1"));
        assert_eq!(p.username.as_deref(), Some("u@x"));
        assert_eq!(p.password.as_deref(), Some("p:w"));
        assert_eq!(p.db, 3);
        let p = parse("redis://[::1]").expect("parses");
        assert!(matches!(&p.addr, Addr::Tcp(h, 6379) if h == "::1"));
        let p = parse("unix:///tmp/r%20s.sock?db=2&pass=a+b").expect("parses");
        assert!(matches!(&p.addr, Addr::Unix(path) if path.as_os_str() == "/tmp/r s.sock"));
        assert_eq!((p.db, p.password.as_deref()), (2, Some("a b")));
        for refused in [
            "rediss://h",
            "redis://",
            "redis://0.0.0.0",
            "redis://[::]:1",
            "redis://h:99999",
            "redis://h/-1",
            "redis://h/x",
            "redis://h?protocol=4",
            "redis://h ost",
            "http://h",
            "unix://other/x",
            "unix:///a/../b",
            "unix:///%2e",
            "unix:///a/%2E%2e/b",
            "unix:///a/.%2e",
            "unix:///s?db=x",
            "unix:///a:",
            "unix:///a%7C/s",
            "unix:///@127.0.0.1/a%3A?",
            "unix://localhost/aA|?",
        ] {
            assert!(parse(refused).is_err(), "{refused}");
        }
    }

    /// redis-rs's reading of `url`, in this module's terms (`None`: refused, or TLS).
    fn reference(url: &str) -> Option<(String, Option<String>, Option<String>, i64)> {
        use redis::IntoConnectionInfo;
        let info = url.into_connection_info().ok()?;
        let addr = match info.addr() {
            redis::ConnectionAddr::Tcp(host, port) => format!("tcp {host} {port}"),
            redis::ConnectionAddr::Unix(path) => format!("unix {}", path.display()),
            _ => return None,
        };
        let s = info.redis_settings();
        Some((
            addr,
            s.username().map(str::to_owned),
            s.password().map(str::to_owned),
            s.db(),
        ))
    }

    fn ours(url: &str) -> Option<(String, Option<String>, Option<String>, i64)> {
        let p = parse(url).ok()?;
        let addr = match &p.addr {
            Addr::Tcp(host, port) => format!("tcp {host} {port}"),
            Addr::Unix(path) => format!("unix {}", path.display()),
        };
        Some((addr, p.username, p.password, p.db))
    }

    /// A piece of a URL from an alphabet with every delimiter and escape in it.
    fn piece(max: usize) -> impl Strategy<Value = String> {
        proptest::collection::vec(
            prop_oneof![
                6 => "[a-zA-Z0-9]",
                4 => proptest::sample::select(vec![
                    ".", "-", "_", "~", "%", ":", "@", "/", "?", "#", "&", "=", "+", "[", "]",
                    "!", "$", "'", "(", ")", "*", ",", ";", " ", "\\", "^", "|", "<", ">",
                    "\"", "{", "}", "`", "\t", "é", "%40", "%3A", "%2F", "%20", "%zz", "%4",
                    "%C3%A9", "%FF", "%2e", "..",
                ])
                .prop_map(str::to_owned),
            ],
            0..max,
        )
        .prop_map(|parts| parts.concat())
    }

    /// URLs near the accepted forms: a scheme, maybe a login, a host, maybe a port, a path,
    /// a query and a fragment, each drawn from [`piece`] or from well-formed choices.
    fn near_url() -> impl Strategy<Value = String> {
        let scheme = proptest::sample::select(vec![
            "redis",
            "REDIS",
            "valkey",
            "rediss",
            "unix",
            "redis+unix",
            "valkey+unix",
            "http",
        ]);
        let login = prop_oneof![Just(String::new()), piece(8).prop_map(|s| format!("{s}@"))];
        let host = prop_oneof![
            proptest::sample::select(vec![
                "127.0.0.1",
                "localhost",
                "[::1]",
                "[0:0::1]",
                "0.0.0.0",
                "[::]",
                "",
                "h-1.x_y~",
                "[fe80::1%25eth0]",
                "EXAMPLE.com",
            ])
            .prop_map(str::to_owned),
            piece(8),
        ];
        let port = prop_oneof![
            Just(String::new()),
            proptest::sample::select(vec![":6380", ":", ":0", ":065535", ":65536", ":+1"])
                .prop_map(str::to_owned),
            piece(4).prop_map(|s| format!(":{s}")),
        ];
        let path = prop_oneof![
            proptest::sample::select(vec![
                "",
                "/",
                "/3",
                "/03/",
                "//2//",
                "/-1",
                "/+1",
                "/tmp/r.sock",
                "/a/./b",
                "/a/../b",
                "/99999999999999999999"
            ])
            .prop_map(str::to_owned),
            piece(8).prop_map(|s| format!("/{s}")),
        ];
        let query = prop_oneof![
            Just(String::new()),
            proptest::sample::select(vec![
                "?db=2",
                "?protocol=resp3",
                "?protocol=x",
                "?user=a+b&pass=c%26d",
                "?db=1&db=x",
                "?db=-1",
                "?db=",
                "?db"
            ])
            .prop_map(str::to_owned),
            piece(10).prop_map(|s| format!("?{s}")),
        ];
        let fragment = prop_oneof![Just(String::new()), piece(4).prop_map(|s| format!("#{s}"))];
        (scheme, login, host, port, path, query, fragment)
            .prop_map(|(sc, l, h, p, pa, q, f)| format!("{sc}://{l}{h}{p}{pa}{q}{f}"))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]

        /// Every URL this parser accepts, redis-rs reads the same way.
        #[test]
        fn accepted_urls_read_as_redis_rs_reads_them(url in near_url()) {
            if let Some(ours) = ours(&url) {
                prop_assert_eq!(Some(ours), reference(&url), "{}", url);
            }
        }

        /// Every well-formed URL of the forms listed is accepted, by both.
        #[test]
        fn the_listed_forms_are_accepted(
            scheme in proptest::sample::select(vec!["redis", "valkey"]),
            user in "[a-zA-Z0-9]{0,4}(%40|%3A|%C3%A9)?",
            pass in "[a-zA-Z0-9:]{0,4}(%40|%2F)?",
            host in proptest::sample::select(vec!["127.0.0.1", "localhost", "[::1]", "cache-1.example_x"]),
            port in proptest::option::of(1u16..),
            db in proptest::option::of(0u32..16),
            socket in "/[a-z]{1,6}(/[a-z0-9][a-z0-9.]{0,5}|/%20){0,3}",
            sdb in proptest::option::of(0u32..16),
        ) {
            let login = match (user.is_empty(), pass.is_empty()) {
                (true, true) => String::new(),
                _ => format!("{user}:{pass}@"),
            };
            let port = port.map(|p| format!(":{p}")).unwrap_or_default();
            let db = db.map(|d| format!("/{d}")).unwrap_or_default();
            let tcp = format!("{scheme}://{login}{host}{port}{db}");
            let sdb = sdb.map(|d| format!("?db={d}")).unwrap_or_default();
            let unix = format!("unix://{socket}{sdb}");
            for url in [tcp, unix] {
                let ours = ours(&url);
                prop_assert!(ours.is_some(), "{}", url);
                prop_assert_eq!(ours, reference(&url), "{}", url);
            }
        }
    }

    #[test]
    fn a_refusal_never_shows_the_password() {
        let Err(WireError::Url(message)) = parse("redis://u:secret@h:notaport") else {
            panic!("refused");
        };
        assert!(!message.contains("secret"), "{message}");
    }
}
