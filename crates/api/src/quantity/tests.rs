//! Cases from apimachinery's `staging/src/k8s.io/apimachinery/pkg/api/resource/quantity_test.go`
//! (`TestQuantityParse`, `TestQuantityString`, `TestQuantityParseEmit`, `TestJSONWhitespace`),
//! each expected string being what Go's `Quantity.String()` / `MarshalJSON` gives for it.

use super::*;

fn canon(s: &str) -> String {
    match Quantity::parse(s) {
        Ok(q) => q.to_string(),
        Err(e) => panic!("{s:?}: {e}"),
    }
}

/// `TestQuantityParse`'s table, with the canonical string of each expected value. A string
/// already canonical for its scale (scale a multiple of 3, no `000` tail, no leading zero;
/// binary: an odd multiple of a power of 1024) is kept as written, as Go keeps `q.s`.
#[test]
fn parse_table() {
    let cases = [
        ("0", "0"),
        ("0n", "0"),
        ("0u", "0"),
        ("0m", "0"),
        ("0Ki", "0"),
        ("0k", "0"),
        ("0Mi", "0"),
        ("0M", "0"),
        ("0Gi", "0"),
        ("0G", "0"),
        ("0Ti", "0"),
        ("0T", "0"),
        ("1", "1"),
        // Binary suffixes.
        ("1Ki", "1Ki"),
        ("8Ki", "8Ki"),
        ("7Mi", "7Mi"),
        ("6Gi", "6Gi"),
        ("5Ti", "5Ti"),
        ("4Pi", "4Pi"),
        ("3Ei", "3Ei"),
        ("10Ti", "10Ti"),
        ("100Ti", "100Ti"),
        // Decimal suffixes.
        ("5n", "5n"),
        ("4u", "4u"),
        ("3m", "3m"),
        ("9", "9"),
        ("8k", "8k"),
        ("50k", "50k"),
        ("7M", "7M"),
        ("6G", "6G"),
        ("5T", "5T"),
        ("40T", "40T"),
        ("300T", "300T"),
        ("2P", "2P"),
        ("1E", "1E"),
        // Decimal exponents.
        ("1E-3", "1E-3"),
        ("1e3", "1e3"),
        ("1E6", "1E6"),
        ("1e9", "1e9"),
        ("1E12", "1E12"),
        ("1e15", "1e15"),
        ("1E18", "1E18"),
        // Nonstandard but still parsable.
        ("1e14", "100e12"),
        ("1e13", "10e12"),
        ("100.035k", "100.035k"),
        // Things that look like floating point.
        ("0.001", "1m"),
        ("0.0005k", "500m"),
        ("0.005", "5m"),
        ("0.05", "50m"),
        ("0.5", "500m"),
        ("0.00050k", "500m"),
        ("0.00500", "5m"),
        ("0.05000", "50m"),
        ("0.50000", "500m"),
        ("0.5e0", "500e-3"),
        ("0.5e-1", "50e-3"),
        ("0.5e-2", "5e-3"),
        ("10.035M", "10.035M"),
        ("1.2e3", "1200"),
        ("1.3E+6", "1300e3"),
        ("1.40e9", "1400e6"),
        ("1.53E12", "1530e9"),
        ("1.6e15", "1600e12"),
        ("1.7E18", "1700e15"),
        ("9.01", "9010m"),
        ("8.1k", "8100"),
        ("7.123456M", "7.123456M"),
        ("6.987654321G", "6.987654321G"),
        ("5.444T", "5.444T"),
        ("40.1T", "40100G"),
        ("300.2T", "300200G"),
        ("2.5P", "2500T"),
        ("1.01E", "1010P"),
        // Things that saturate/round.
        ("3.001n", "4n"),
        ("1.1E-9", "2e-9"),
        ("0.0000000001", "1n"),
        ("0.0000000005", "1n"),
        ("0.00000000050", "1n"),
        ("0.5e-9", "1e-9"),
        ("0.9n", "1n"),
        ("0.00000012345", "124n"),
        ("0.00000012354", "124n"),
        ("9Ei", "9223372036854775807"),
        ("9223372036854775807Ki", "9223372036854775807"),
        ("12E", "12E"),
        // Fractional binary.
        ("100.035Ki", "102435840m"),
        ("0.5Mi", "512Ki"),
        ("0.05Gi", "53687091200m"),
        ("0.025Ti", "27487790694400m"),
        // Things written by trolls.
        ("0.000000000001Ki", "2n"),
        (".001", "1m"),
        (".0001k", "100m"),
        ("1.", "1."),
        ("1.G", "1.G"),
        // The issue's examples.
        ("1000m", "1"),
        ("1024Mi", "1Gi"),
        ("1.5Gi", "1536Mi"),
        ("1.5", "1500m"),
    ];
    for (input, want) in cases {
        assert_eq!(canon(input), want, "{input}");
        // The negative of everything (zero stays "0"), and an explicit `+`.
        let neg = canon(&format!("-{input}"));
        let plus = canon(&format!("+{input}"));
        if want == "0" {
            assert_eq!(neg, "0", "-{input}");
            assert_eq!(plus, "0", "+{input}");
        } else if plus == format!("+{input}") {
            // Kept as written (Go's `q.s`), sign included.
            assert_eq!(want, input, "{input}");
            assert_eq!(neg, format!("-{input}"), "-{input}");
        } else {
            assert_eq!(neg, format!("-{want}"), "-{input}");
            assert_eq!(plus, want, "+{input}");
        }
    }
}

/// `TestQuantityString`: each canonical string parses to itself, each alternate to it.
#[test]
fn canonical_strings() {
    let cases = [
        ("1Gi", "1024Mi"),
        ("300Mi", "307200Ki"),
        ("6Ki", ""),
        ("1001Gi", "1025024Mi"),
        ("1Ti", "1024Gi"),
        ("5", "5000m"),
        ("500m", "0.5"),
        ("1G", "1000M"),
        ("1G", "0.001T"),
        ("1m", "1000u"),
        ("80m", ""),
        ("1080m", "1.08"),
        ("1080m", "1080000000n"),
        ("300M", ""),
        ("1T", ""),
        ("1E", ""),
        ("1e21", "1000E"),
        ("5e21", "5000E"),
        ("1e24", "1000000E"),
        ("1234567M", ""),
        ("1234567m", ""),
        ("3k", ""),
        ("1025", ""),
        ("0", "00"),
        ("1e9", ".001e12"),
        ("1e-3", "0.001e0"),
        ("1e-9", "1000e-12"),
        ("80e-3", ""),
        ("300e6", ""),
        ("1e12", ""),
        ("1e3", ""),
        ("3e3", ""),
        ("1n", ""),
        ("80n", ""),
        ("1080n", ""),
        ("1u", ""),
        ("80u", ""),
        ("1080u", ""),
    ];
    for (expect, alternate) in cases {
        assert_eq!(canon(expect), expect);
        if !alternate.is_empty() {
            assert_eq!(canon(alternate), expect, "{alternate}");
        }
    }
}

/// `TestQuantityParseEmit`.
#[test]
fn parse_emit() {
    for (input, want) in [
        ("1Ki", "1Ki"),
        ("1Mi", "1Mi"),
        ("1Gi", "1Gi"),
        ("1024Mi", "1Gi"),
        ("1000M", "1G"),
        (".001Ki", "1024m"),
        (".000001Ki", "1024u"),
        (".000000001Ki", "1024n"),
        (".000000000001Ki", "2n"),
    ] {
        assert_eq!(canon(input), want, "{input}");
        assert_eq!(canon(&format!("-{input}")), format!("-{want}"), "-{input}");
    }
}

/// `TestQuantityParse`'s invalid list, with the error each gets.
#[test]
fn invalid() {
    use QuantityError::*;
    for (input, want) in [
        ("", FormatWrong),
        ("1.1.M", FormatWrong),
        ("1+1.0M", FormatWrong),
        ("0.1mi", Suffix),
        ("0.1am", FormatWrong),
        ("aoeu", FormatWrong),
        (".5i", Suffix),
        ("1i", Suffix),
        ("-3.01i", Suffix),
        ("-3.01e-", Suffix),
        ("1e4294967297", Suffix),
        (" 1", FormatWrong),
        ("1 ", FormatWrong),
        ("1Gb", FormatWrong),
        ("1ki", Suffix),
    ] {
        assert_eq!(Quantity::parse(input), Err(want), "{input:?}");
    }
    assert_eq!(
        FormatWrong.to_string(),
        "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    );
    assert_eq!(Suffix.to_string(), "unable to parse quantity's suffix");
}

/// `TestJSONWhitespace`, and numbers become strings.
#[test]
fn json() {
    for (input, want) in [
        (r#"" 1""#, "\"1\""),
        (r#""1 ""#, "\"1\""),
        ("1", "\"1\""),
        (" 1", "\"1\""),
        ("10", "\"10\""),
        ("-1", "\"-1\""),
        ("0.5", "\"500m\""),
        (r#""1000m""#, "\"1\""),
        ("null", "\"0\""),
    ] {
        let q: Quantity = serde_json::from_str(input).expect(input);
        assert_eq!(serde_json::to_string(&q).expect("json"), want, "{input}");
    }
    let e = serde_json::from_str::<Quantity>(r#""x""#).expect_err("x");
    assert!(e.to_string().starts_with(ERR_FORMAT_WRONG), "{e}");
}

#[test]
fn sign() {
    // `TestParseQuantityString`: "." and "-." scan as zero.
    assert_eq!(canon("."), "0");
    assert_eq!(canon("-."), "0");
    assert_eq!(canon("-1").parse::<Quantity>().map(|q| q.sign()), Ok(-1));
    assert_eq!(Quantity::parse("-0.0").map(|q| q.sign()), Ok(0));
    assert_eq!(Quantity::parse("-1Gi").map(|q| q.sign()), Ok(-1));
    assert_eq!(Quantity::parse("1n").map(|q| q.sign()), Ok(1));
}

/// Found by the `quantity` fuzz target: like apimachinery's `CanonicalizeBytes`, a BinarySI
/// amount that is a whole number but no whole number of KiB is written without a suffix,
/// and that string parses as DecimalSI — so canonical form is stable only from the second
/// parse on. Go does the same (`quantity.go`, `CanonicalizeBytes`).
#[test]
fn binary_amounts_off_a_kib_boundary_settle_after_one_reparse() {
    let first = Quantity::parse("312.5Ki").unwrap();
    assert_eq!(first.as_str(), "320000");
    let second = Quantity::parse(first.as_str()).unwrap();
    assert_eq!(second.as_str(), "320k");
    assert_eq!(Quantity::parse(second.as_str()).unwrap().as_str(), "320k");
}
