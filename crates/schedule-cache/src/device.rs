//! [`Cpu`]: the machine timings are measured on, named for [`TimingIdentity`]: vendor, model,
//! the instruction-set features that change code, and the worker pool.
//!
//! Two machines sharing one schedule directory must not replay each other's winners: a
//! device of `std::env::consts::ARCH` alone makes every x86-64 machine one device. The
//! key form ([`timing_identity`](Cpu::timing_identity)'s device) names everything known; the
//! [`readable`](Cpu::readable) form is one short line for people.
//!
//! ```
//! use schedule_cache::Cpu;
//! let here = Cpu::this_machine();
//! println!("device: {}", here.readable()); // e.g. "Intel(R) Xeon(R) Processor (GenuineIntel 6/167; x86_64 avx512; 2 workers)"
//! let timing = here.timing_identity(None);
//! assert!(timing.device.contains(std::env::consts::ARCH));
//! ```

use serde::{Deserialize, Serialize};

/// Writes [`CODE_FEATURES`] and [`detected_features`] from one list per architecture (the
/// detection macros need literal names): the x86 names, then the AArch64 names not among
/// them, then the x86 names AArch64 also detects.
macro_rules! code_features {
    (x86: [$($x:tt),*], aarch64: [$($a:tt),*], aarch64_also: [$($s:tt),*]) => {
        /// The features that change the code a compiler emits or its speed, as Rust's run-time
        /// detection names them: an allow list, checked one by one where the architecture has
        /// them (x86, x86-64, AArch64); what the operating system lets code use, not only what
        /// the CPU has.
        pub(crate) const CODE_FEATURES: &[&str] = &[$($x,)* $($a,)*];

        /// The [`CODE_FEATURES`] this process can use, detected at run time, in the allow
        /// list's order whatever the detection's.
        fn detected_features() -> Vec<String> {
            #[allow(unused_mut)]
            let mut found: Vec<&str> = Vec::new();
            #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
            {
                $(if std::arch::is_x86_feature_detected!($x) { found.push($x); })*
            }
            #[cfg(target_arch = "aarch64")]
            {
                $(if std::arch::is_aarch64_feature_detected!($a) { found.push($a); })*
                $(if std::arch::is_aarch64_feature_detected!($s) { found.push($s); })*
            }
            CODE_FEATURES
                .iter()
                .filter(|f| found.contains(f))
                .map(|f| f.to_string())
                .collect()
        }
    };
}

code_features! {
    x86: [
        "sse3", "ssse3", "sse4.1", "sse4.2", "popcnt", "aes", "pclmulqdq", "sha", "avx", "avx2",
        "fma", "f16c", "bmi1", "bmi2", "lzcnt", "movbe", "avx512f", "avx512cd", "avx512bw",
        "avx512dq", "avx512vl", "avx512ifma", "avx512vbmi", "avx512vbmi2", "avx512vnni",
        "avx512bitalg", "avx512vpopcntdq", "avx512bf16", "avx512fp16", "gfni", "vaes",
        "vpclmulqdq"
    ],
    aarch64: ["neon", "sha2", "fp16", "dotprod", "i8mm", "bf16", "sve", "sve2"],
    aarch64_also: ["aes"]
}

/// The machine timings are measured on. Build it with [`Cpu::this_machine`], or construct one
/// (every field is public) to describe another.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cpu {
    /// The architecture (`std::env::consts::ARCH`).
    pub arch: String,
    /// The vendor (`vendor_id` of `/proc/cpuinfo`, `CPU implementer` on AArch64), if known.
    pub vendor: Option<String>,
    /// The model name (`model name`, `CPU part` on AArch64), if known.
    pub model: Option<String>,
    /// The family and model numbers (`cpu family`/`model`, e.g. `6/167`), if known.
    pub family: Option<String>,
    /// The cache size `/proc/cpuinfo` reports (`cache size`), if known.
    pub cache: Option<String>,
    /// The `CODE_FEATURES` this process can use, in that list's order.
    pub features: Vec<String>,
    /// The worker pool: the threads this process may run at once (`available_parallelism`).
    pub workers: usize,
    /// Whether `/proc/cpuinfo` could be read (the readable form says so when not).
    pub cpuinfo: bool,
}

impl Cpu {
    /// The machine this process runs on: `/proc/cpuinfo` where it can be read (Linux), the
    /// features detected at run time, the threads this process may use. Where `/proc/cpuinfo`
    /// is missing, vendor and model are unknown (and the readable form says so): the key form
    /// then holds what is known, the architecture, `unknown` vendor and model, the features
    /// and the workers.
    pub fn this_machine() -> Cpu {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").ok();
        let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
        Cpu::from_cpuinfo(
            cpuinfo.as_deref(),
            std::env::consts::ARCH,
            detected_features(),
            workers,
        )
    }

    /// A CPU as `cpuinfo` (the text of `/proc/cpuinfo`, `None` when it could not be read)
    /// describes it, with `arch`, `features` and `workers` as given. The first processor's
    /// lines are read.
    pub fn from_cpuinfo(
        cpuinfo: Option<&str>,
        arch: &str,
        features: Vec<String>,
        workers: usize,
    ) -> Cpu {
        let field = |names: &[&str]| -> Option<String> {
            let text = cpuinfo?;
            // The first processor's block: up to the first blank line.
            let block = text.split("\n\n").next().unwrap_or(text);
            names.iter().find_map(|name| {
                block.lines().find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    (k.trim() == *name)
                        .then(|| v.trim().to_string())
                        .filter(|v| !v.is_empty())
                })
            })
        };
        let family = match (field(&["cpu family"]), field(&["model"])) {
            (Some(f), Some(m)) => Some(format!("{f}/{m}")),
            (f, m) => f.or(m),
        };
        Cpu {
            arch: arch.to_string(),
            vendor: field(&["vendor_id", "CPU implementer"]),
            model: field(&["model name", "CPU part", "cpu model", "Processor"]),
            family,
            cache: field(&["cache size"]),
            features,
            workers,
            cpuinfo: cpuinfo.is_some(),
        }
    }

    /// The full form, what enters the key: every field as `name=value` (`unknown` when not
    /// known; a value that is not one plain word quoted, so no value can run into its
    /// neighbour or pass for an unknown one), each feature as `+name`, e.g.
    /// `arch=x86_64 vendor=GenuineIntel model="Intel(R) Xeon(R) Processor" family=6/167
    /// cache="491520 KB" +sse3 … +avx512f … workers=2`.
    pub(crate) fn key_form(&self) -> String {
        let text = |name: &str, v: Option<&str>| match v {
            Some(v) => format!("{name}={}", value(v)),
            None => format!("{name}=unknown"),
        };
        let mut words = vec![
            text("arch", Some(&self.arch)),
            text("vendor", self.vendor.as_deref()),
            text("model", self.model.as_deref()),
            text("family", self.family.as_deref()),
            text("cache", self.cache.as_deref()),
        ];
        words.extend(self.features.iter().map(|f| format!("+{}", value(f))));
        words.push(format!("workers={}", self.workers));
        words.join(" ")
    }

    /// A short line for people: the model (or `unknown cpu`, saying why), the vendor and
    /// family, the architecture, the widest vector extension and the workers, e.g.
    /// `Intel(R) Xeon(R) Processor (GenuineIntel 6/167; x86_64 avx512; 2 workers)`.
    pub fn readable(&self) -> String {
        let model = match (&self.model, self.cpuinfo) {
            (Some(m), _) => m.clone(),
            (None, true) => "unknown cpu (/proc/cpuinfo names no model)".to_string(),
            (None, false) => "unknown cpu (no /proc/cpuinfo)".to_string(),
        };
        let maker: Vec<&str> = [&self.vendor, &self.family]
            .into_iter()
            .filter_map(|v| v.as_deref())
            .collect();
        let has = |f: &str| self.features.iter().any(|x| x == f);
        let vector = ["avx512f", "avx2", "avx", "sse4.2", "sve2", "sve", "neon"]
            .into_iter()
            .find(|f| has(f))
            .map(|f| if f == "avx512f" { "avx512" } else { f });
        let mut arch = self.arch.clone();
        if let Some(v) = vector {
            arch = format!("{arch} {v}");
        }
        let workers = match self.workers {
            1 => "1 worker".to_string(),
            n => format!("{n} workers"),
        };
        if maker.is_empty() {
            format!("{model} ({arch}; {workers})")
        } else {
            format!("{model} ({}; {arch}; {workers})", maker.join(" "))
        }
    }

    /// The timing identity of timings measured on this CPU: the `key_form`
    /// as the device, `toolchain` as given.
    pub fn timing_identity(&self, toolchain: Option<String>) -> TimingIdentity {
        TimingIdentity {
            device: self.key_form(),
            toolchain,
        }
    }
}

/// A value as the key form writes it: as it is when it is one plain word (letters, digits,
/// `_`, `.`, `-`, `/`) other than `unknown`, else quoted and escaped (`{:?}`): a plain value
/// holds no space or quote and a quoted one starts with a quote, so no value can pass for
/// another field, another value or an unknown one.
fn value(v: &str) -> String {
    let plain = !v.is_empty()
        && v != "unknown"
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | '/'));
    if plain {
        v.to_string()
    } else {
        format!("{v:?}")
    }
}

/// The concrete device capabilities timings were measured on (and, optionally, observed
/// toolchain metadata). Without it there is no cache key.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimingIdentity {
    /// The concrete device (model, capabilities).
    pub device: String,
    /// Observed toolchain metadata, if any.
    pub toolchain: Option<String>,
}

impl TimingIdentity {
    /// The identity of the CPU this process runs on, for timings measured on it:
    /// [`Cpu::this_machine`](crate::Cpu::this_machine)'s key form (architecture, vendor,
    /// model, family, cache size, the code-changing features the process can use, the
    /// workers), `toolchain` as given. Two machines whose timings should not be shared must
    /// differ in it: a device string that names nothing (an empty one, say) lets every
    /// machine's winners share one key.
    ///
    /// ```
    /// use schedule_cache::TimingIdentity;
    /// let here = TimingIdentity::this_cpu(Some("cc 12.2".into()));
    /// assert!(here.device.contains(std::env::consts::ARCH));
    /// assert_eq!(here, TimingIdentity::this_cpu(Some("cc 12.2".into())));
    /// ```
    pub fn this_cpu(toolchain: Option<String>) -> TimingIdentity {
        crate::Cpu::this_machine().timing_identity(toolchain)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A field value among those that could make one field pass for another: a space, a
    /// quote, `=`, `+`, the word `unknown`, another field's spelling.
    fn text() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("unknown".to_string()),
            Just(String::new()),
            Just("a".to_string()),
            Just("a b".to_string()),
            Just("\"a\"".to_string()),
            Just("a\" model=\"b".to_string()),
            Just("a model=b".to_string()),
            Just("+a".to_string()),
            Just("a workers=1".to_string()),
            "[a-c \"\\\\=+]{0,4}",
        ]
    }

    fn any_cpu() -> impl Strategy<Value = Cpu> {
        (
            text(),
            proptest::option::of(text()),
            proptest::option::of(text()),
            proptest::option::of(text()),
            proptest::option::of(text()),
            proptest::collection::vec(text(), 0..3),
            1usize..3,
        )
            .prop_map(
                |(arch, vendor, model, family, cache, features, workers)| Cpu {
                    arch,
                    vendor,
                    model,
                    family,
                    cache,
                    features,
                    workers,
                    cpuinfo: true,
                },
            )
    }

    /// `cpu` with field `i` (of the six text fields and the feature list) set to `v`.
    fn with_field(mut cpu: Cpu, i: usize, v: Option<String>) -> Cpu {
        match i {
            0 => cpu.arch = v.unwrap_or_default(),
            1 => cpu.vendor = v,
            2 => cpu.model = v,
            3 => cpu.family = v,
            4 => cpu.cache = v,
            _ => cpu.features = v.into_iter().collect(),
        }
        cpu
    }

    proptest! {
        /// Two descriptions share a key form exactly when they are equal: no value, however
        /// spelled, passes for another field, another value or an unknown one. The second
        /// description is the first with up to two fields set anew (two random ones are
        /// almost never close enough to collide).
        #[test]
        fn the_key_form_is_injective(
            a in any_cpu(),
            changes in proptest::collection::vec((0usize..6, proptest::option::of(text())), 1..3),
            other in any_cpu(),
        ) {
            let b = changes.into_iter().fold(a.clone(), |c, (i, v)| with_field(c, i, v));
            prop_assert_eq!(a == b, a.key_form() == b.key_form());
            prop_assert_eq!(a == other, a.key_form() == other.key_form());
        }
    }

    const XEON: &str = "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 167\nmodel name\t: Intel(R) Xeon(R) Processor\ncache size\t: 491520 KB\nflags\t\t: fpu sse avx2\n\nprocessor\t: 1\nvendor_id\t: Other\n";

    fn feats(f: &[&str]) -> Vec<String> {
        f.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn cpuinfo_is_read_from_the_first_processor() {
        let cpu = Cpu::from_cpuinfo(Some(XEON), "x86_64", feats(&["avx2", "fma"]), 2);
        assert_eq!(cpu.vendor.as_deref(), Some("GenuineIntel"));
        assert_eq!(cpu.model.as_deref(), Some("Intel(R) Xeon(R) Processor"));
        assert_eq!(cpu.family.as_deref(), Some("6/167"));
        assert_eq!(cpu.cache.as_deref(), Some("491520 KB"));
        assert_eq!(
            cpu.key_form(),
            "arch=x86_64 vendor=GenuineIntel model=\"Intel(R) Xeon(R) Processor\" family=6/167 cache=\"491520 KB\" +avx2 +fma workers=2"
        );
        assert_eq!(
            cpu.readable(),
            "Intel(R) Xeon(R) Processor (GenuineIntel 6/167; x86_64 avx2; 2 workers)"
        );
    }

    #[test]
    fn without_cpuinfo_the_cpu_is_unknown_and_says_so() {
        let cpu = Cpu::from_cpuinfo(None, "x86_64", feats(&["avx2"]), 8);
        assert_eq!(
            cpu.key_form(),
            "arch=x86_64 vendor=unknown model=unknown family=unknown cache=unknown +avx2 workers=8"
        );
        assert_eq!(
            cpu.readable(),
            "unknown cpu (no /proc/cpuinfo) (x86_64 avx2; 8 workers)"
        );
        // Never equal to a machine that names "unknown" as its model.
        let named = Cpu {
            model: Some("unknown".into()),
            ..cpu.clone()
        };
        assert_ne!(named.key_form(), cpu.key_form());
    }

    #[test]
    fn the_machine_here_is_described() {
        let here = Cpu::this_machine();
        assert_eq!(here.arch, std::env::consts::ARCH);
        assert!(here.workers >= 1);
        assert_eq!(here, Cpu::this_machine(), "stable within a process");
        for f in &here.features {
            assert!(CODE_FEATURES.contains(&f.as_str()), "{f}");
        }
        #[cfg(target_os = "linux")]
        assert!(here.cpuinfo, "Linux has /proc/cpuinfo");
    }

    /// Every field of two descriptions shows in the key form, so two machines that differ
    /// in any of them never share a key.
    #[test]
    fn every_field_enters_the_key_form() {
        let a = Cpu::from_cpuinfo(Some(XEON), "x86_64", feats(&["avx2", "fma"]), 2);
        let variants = [
            Cpu {
                arch: "x86".into(),
                ..a.clone()
            },
            Cpu {
                vendor: Some("AuthenticAMD".into()),
                ..a.clone()
            },
            Cpu {
                model: None,
                ..a.clone()
            },
            Cpu {
                family: Some("6/143".into()),
                ..a.clone()
            },
            Cpu {
                cache: Some("1024 KB".into()),
                ..a.clone()
            },
            Cpu {
                features: feats(&["avx2"]),
                ..a.clone()
            },
            Cpu {
                workers: 4,
                ..a.clone()
            },
        ];
        for v in &variants {
            assert_ne!(v.key_form(), a.key_form(), "{v:?}");
        }
    }
}
