//! `debugPrintfEXT` format strings: parsed when a kernel loads (against
//! the types of the call's arguments), formatted on the host from the
//! words a record holds, as C's `printf` formats (the conversions
//! `GL_EXT_debug_printf` defines: `%d %i %u %x %X %o %c` for integers,
//! `%f %F %e %E %g %G %a %A` for floats, `%s` for string literals, `%%`,
//! with flags `- + space # 0`, a width and a precision (each at most
//! [`LIMIT`]), `l` for 64-bit integers, and `%vN` for vectors of N
//! components, printed `, `-separated).

/// What one argument of a conversion is, as the kernel passes it: its
/// scalar kind and width, and its component count (1 for a scalar).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArgType {
    /// Integer (signed or not) or float.
    pub kind: ArgKind,
    /// Bits per component, as the record holds it (32 or 64).
    pub width: u32,
    /// Components: 1, or 2 to 4 for a vector.
    pub components: u32,
}

/// The scalar kind of an argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgKind {
    /// A signed integer.
    Signed,
    /// An unsigned integer.
    Unsigned,
    /// A float.
    Float,
}

impl ArgType {
    /// The 32-bit words one value takes in a record.
    pub fn words(&self) -> u32 {
        self.components * self.width.div_ceil(32)
    }
}

/// One conversion of a format.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conversion {
    /// `-`, `+`, ` `, `#`, `0`.
    pub flags: String,
    /// The minimum width.
    pub width: Option<usize>,
    /// The precision.
    pub precision: Option<usize>,
    /// Components: 1, or N for `%vN`.
    pub vector: u32,
    /// `l`: a 64-bit integer.
    pub long: bool,
    /// The conversion character.
    pub conversion: char,
}

/// One piece of a format: text, a value, or a string argument.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Piece {
    /// Text as it stands.
    Text(String),
    /// A value read from the record, of the given type.
    Value(Conversion, ArgType),
}

/// A parsed format: its pieces, with string arguments already in the
/// text. The record holds the values of its `Value` pieces, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Format {
    /// The pieces.
    pub pieces: Vec<Piece>,
}

impl Format {
    /// The words the values of one record take.
    pub fn value_words(&self) -> u32 {
        self.pieces
            .iter()
            .map(|p| match p {
                Piece::Value(_, t) => t.words(),
                Piece::Text(_) => 0,
            })
            .sum()
    }

    /// The text of a record whose values are `words`.
    pub fn render(&self, words: &[u32]) -> String {
        let mut out = String::new();
        let mut at = 0usize;
        for piece in &self.pieces {
            match piece {
                Piece::Text(t) => out.push_str(t),
                Piece::Value(c, t) => {
                    let n = t.words() as usize;
                    let value = words.get(at..at + n).unwrap_or(&[]);
                    at += n;
                    let per = t.width.div_ceil(32) as usize;
                    let parts: Vec<String> = value
                        .chunks(per.max(1))
                        .map(|w| {
                            let bits = match w {
                                [low] => u64::from(*low),
                                [low, high] => u64::from(*low) | (u64::from(*high) << 32),
                                _ => 0,
                            };
                            format_one(c, t, bits)
                        })
                        .collect();
                    out.push_str(&parts.join(", "));
                }
            }
        }
        out
    }
}

/// A format's argument as the call passes it: a value of a type, or a
/// string literal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Arg {
    /// A value.
    Value(ArgType),
    /// A string literal (`%s`).
    Text(String),
}

/// The largest width or precision a conversion may give: it bounds the
/// text one value makes on the host, whatever a record holds.
pub const LIMIT: usize = 9999;

/// The length modifiers C knows besides `l`, which printf here refuses.
const OTHER_LENGTHS: &str = "hlLjzt";

/// Parses `format` against the call's `args`; the error says what does
/// not match (an unknown conversion, a count or a type that differs, a
/// width or precision over [`LIMIT`]).
pub fn parse(format: &str, args: &[Arg]) -> Result<Format, String> {
    let mut pieces = Vec::new();
    let mut text = String::new();
    let mut args = args.iter().enumerate();
    let mut chars = format.char_indices().peekable();
    let mut index = 0usize;
    while let Some((start, c)) = chars.next() {
        if c != '%' {
            text.push(c);
            continue;
        }
        if chars.peek().map(|&(_, c)| c) == Some('%') {
            chars.next();
            text.push('%');
            continue;
        }
        index += 1;
        let mut conv = Conversion {
            flags: String::new(),
            width: None,
            precision: None,
            vector: 1,
            long: false,
            conversion: ' ',
        };
        while let Some(&(_, f)) = chars.peek() {
            if "-+ #0".contains(f) {
                conv.flags.push(f);
                chars.next();
            } else {
                break;
            }
        }
        conv.width = number(&mut chars);
        if chars.peek().map(|&(_, c)| c) == Some('.') {
            chars.next();
            conv.precision = Some(number(&mut chars).unwrap_or(0));
        }
        for (what, value) in [("width", conv.width), ("precision", conv.precision)] {
            if let Some(n) = value.filter(|&n| n > LIMIT) {
                return Err(format!(
                    "conversion {index} (`{}`): its {what}{} is over the limit of {LIMIT}",
                    written(format, start, &mut chars),
                    if n == usize::MAX {
                        String::new()
                    } else {
                        format!(", {n},")
                    }
                ));
            }
        }
        if chars.peek().map(|&(_, c)| c) == Some('v') {
            chars.next();
            conv.vector = match chars.peek() {
                Some(&(_, n @ '2'..='4')) => {
                    chars.next();
                    n as u32 - '0' as u32
                }
                _ => {
                    return Err(format!(
                        "conversion {index} (`{}`): a vector size must be 2, 3 or 4",
                        written(format, start, &mut chars)
                    ))
                }
            };
        }
        let length_start = chars.peek().map_or(format.len(), |&(i, _)| i);
        while chars.next_if(|&(_, m)| OTHER_LENGTHS.contains(m)).is_some() {}
        let length_end = chars.peek().map_or(format.len(), |&(i, _)| i);
        match format.get(length_start..length_end).unwrap_or("") {
            "" => {}
            "l" => conv.long = true,
            other => {
                return Err(format!(
                    "conversion {index} (`{}`): `{other}` is not a length printf takes \
                     here; `l` (as in `%ld`) is the 64-bit modifier",
                    written(format, start, &mut chars)
                ))
            }
        }
        conv.conversion = chars
            .next()
            .map(|(_, c)| c)
            .ok_or_else(|| format!("the format ends inside conversion {index}"))?;
        let want = match conv.conversion {
            'd' | 'i' | 'u' | 'x' | 'X' | 'o' | 'c' => "an integer",
            'f' | 'F' | 'e' | 'E' | 'g' | 'G' | 'a' | 'A' => "a float",
            's' => "a string literal",
            other => {
                return Err(format!(
                    "conversion {index} `%{other}` is not one printf knows"
                ))
            }
        };
        let Some((position, arg)) = args.next() else {
            return Err(format!(
                "conversion {index} (`%{}`) has no argument: the call passes fewer",
                conv.conversion
            ));
        };
        match (conv.conversion, arg) {
            ('s', Arg::Text(s)) => text.push_str(&string_field(&conv, s)),
            ('s', Arg::Value(_)) | (_, Arg::Text(_)) => {
                return Err(format!(
                    "argument {} does not suit conversion {index} (`%{}`), which takes {want}",
                    position + 1,
                    conv.conversion
                ))
            }
            (c, Arg::Value(t)) => {
                let float = t.kind == ArgKind::Float;
                let fits = (float == "fFeEgGaA".contains(c))
                    && t.components == conv.vector
                    && (float || (t.width == 64) == conv.long);
                if !fits {
                    return Err(format!(
                        "argument {} ({}) does not suit conversion {index} (`%{}{}{c}`), which \
                         takes {want}{}",
                        position + 1,
                        describe(t),
                        if conv.vector > 1 {
                            format!("v{}", conv.vector)
                        } else {
                            String::new()
                        },
                        if conv.long { "l" } else { "" },
                        match (conv.vector, conv.long && !float) {
                            (1, false) => String::new(),
                            (n, long) => format!(
                                "{}{}",
                                if n > 1 {
                                    format!(" vector of {n}")
                                } else {
                                    String::new()
                                },
                                if long { ", 64-bit" } else { "" }
                            ),
                        }
                    ));
                }
                if !text.is_empty() {
                    pieces.push(Piece::Text(std::mem::take(&mut text)));
                }
                pieces.push(Piece::Value(conv, *t));
            }
        }
    }
    if let Some((position, _)) = args.next() {
        return Err(format!(
            "the call passes {} arguments but the format has {index} conversions",
            position + 1 + args.count()
        ));
    }
    if !text.is_empty() {
        pieces.push(Piece::Text(text));
    }
    Ok(Format { pieces })
}

/// The digits at `chars`, read as a number (saturating: a number too
/// large for `usize` is `usize::MAX`); `None` where there are none.
fn number(chars: &mut std::iter::Peekable<std::str::CharIndices<'_>>) -> Option<usize> {
    let mut value: Option<usize> = None;
    while let Some((_, d)) = chars.next_if(|&(_, d)| d.is_ascii_digit()) {
        let digit = d as usize - '0' as usize;
        value = Some(value.unwrap_or(0).saturating_mul(10).saturating_add(digit));
    }
    value
}

/// The conversion that starts at `start` of `format`, as written: what
/// `chars` has read of it, then the rest of its flags, digits and
/// modifiers, and the character that ends it (for an error to quote).
fn written<'a>(
    format: &'a str,
    start: usize,
    chars: &mut std::iter::Peekable<std::str::CharIndices<'_>>,
) -> &'a str {
    while chars
        .next_if(|&(_, c)| c.is_ascii_digit() || "-+ #.v".contains(c) || OTHER_LENGTHS.contains(c))
        .is_some()
    {}
    chars.next();
    let end = chars.peek().map_or(format.len(), |&(i, _)| i);
    format.get(start..end).unwrap_or(format)
}

/// A `%s` argument as C writes it: cut to the precision and padded to
/// the width, both counted in bytes as C counts them (a cut that would
/// split a character ends before it instead).
fn string_field(c: &Conversion, s: &str) -> String {
    let mut end = c.precision.unwrap_or(s.len()).min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    let s = s.get(..end).unwrap_or(s);
    let pad = " ".repeat(c.width.unwrap_or(0).saturating_sub(s.len()));
    if c.flags.contains('-') {
        format!("{s}{pad}")
    } else {
        format!("{pad}{s}")
    }
}

/// An argument's type in words, for an error.
fn describe(t: &ArgType) -> String {
    let scalar = match t.kind {
        ArgKind::Signed => format!("int{}", t.width),
        ArgKind::Unsigned => format!("uint{}", t.width),
        ArgKind::Float => format!("float{}", t.width),
    };
    if t.components > 1 {
        format!("vector of {} {scalar}", t.components)
    } else {
        scalar
    }
}

/// One component, formatted as C's printf would.
fn format_one(c: &Conversion, t: &ArgType, bits: u64) -> String {
    let left = c.flags.contains('-');
    let alt = c.flags.contains('#');
    let plus = if c.flags.contains('+') {
        "+"
    } else if c.flags.contains(' ') {
        " "
    } else {
        ""
    };
    let upper = c.conversion.is_ascii_uppercase();
    // C pads between a sign and a prefix (`0x`) on one side and the
    // digits on the other; `zeros`: whether the `0` flag pads this value
    // with zeros there (integers without a precision, finite floats).
    let integer_zeros = c.precision.is_none();
    let (sign, prefix, body, zeros) = match c.conversion {
        // The record's bits as the conversion reads them, whatever the
        // argument's signedness (as C does).
        'd' | 'i' => {
            let v = crate::eval::sign_extend(bits, t.width);
            let digits = integer_digits(v.unsigned_abs(), 10, false, c.precision);
            (if v < 0 { "-" } else { plus }, "", digits, integer_zeros)
        }
        'u' => (
            "",
            "",
            integer_digits(bits, 10, false, c.precision),
            integer_zeros,
        ),
        'x' | 'X' => {
            let prefix = match (alt && bits != 0, upper) {
                (false, _) => "",
                (true, false) => "0x",
                (true, true) => "0X",
            };
            let digits = integer_digits(bits, 16, upper, c.precision);
            ("", prefix, digits, integer_zeros)
        }
        'o' => {
            let digits = integer_digits(bits, 8, false, c.precision);
            // `#` raises the precision until the first digit is a zero.
            let digits = if alt && !digits.starts_with('0') {
                format!("0{digits}")
            } else {
                digits
            };
            ("", "", digits, integer_zeros)
        }
        // glibc pads `%c` with spaces whatever the flags.
        'c' => (
            "",
            "",
            char::from_u32(bits as u32 & 0x10_ffff)
                .unwrap_or(char::REPLACEMENT_CHARACTER)
                .to_string(),
            false,
        ),
        conv => {
            // The sign from the bits: a NaN's too (glibc prints `-nan`),
            // which a conversion to f64 need not keep.
            let (v, negative) = match t.width {
                16 => (
                    half::f16::from_bits(bits as u16).to_f64(),
                    bits & (1 << 15) != 0,
                ),
                32 => (
                    f64::from(f32::from_bits(bits as u32)),
                    bits & (1 << 31) != 0,
                ),
                _ => (f64::from_bits(bits), bits & (1 << 63) != 0),
            };
            let sign = if negative { "-" } else { plus };
            let v = v.abs();
            if !v.is_finite() {
                // C pads NaN and infinity with spaces, never zeros.
                let text = if v.is_nan() { "nan" } else { "inf" };
                (sign, "", text.to_string(), false)
            } else if conv.eq_ignore_ascii_case(&'a') {
                let prefix = if upper { "0X" } else { "0x" };
                (sign, prefix, hex_form(v, c.precision, alt), true)
            } else {
                (sign, "", float_body(conv, v, c.precision, alt), true)
            }
        }
    };
    let body = if upper {
        body.to_ascii_uppercase()
    } else {
        body
    };
    let len = sign.len() + prefix.len() + body.chars().count();
    let pad = c.width.unwrap_or(0).saturating_sub(len);
    if left {
        // `-` overrides `0`.
        format!("{sign}{prefix}{body}{}", " ".repeat(pad))
    } else if zeros && c.flags.contains('0') {
        format!("{sign}{prefix}{}{body}", "0".repeat(pad))
    } else {
        format!("{}{sign}{prefix}{body}", " ".repeat(pad))
    }
}

/// The digits of `v` in `radix` (16: in upper case if `upper`), at least
/// `precision` of them, as C writes an integer's.
fn integer_digits(v: u64, radix: u32, upper: bool, precision: Option<usize>) -> String {
    let mut digits = match radix {
        16 if upper => format!("{v:X}"),
        16 => format!("{v:x}"),
        8 => format!("{v:o}"),
        _ => format!("{v}"),
    };
    match precision {
        // C: a zero with precision 0 prints nothing.
        Some(0) if v == 0 => digits.clear(),
        Some(p) if digits.len() < p => digits = format!("{}{digits}", "0".repeat(p - digits.len())),
        _ => {}
    }
    digits
}

/// A finite non-negative float under conversion `conv` (`f`, `e` or `g`,
/// either case), without sign, in lower case.
fn float_body(conv: char, v: f64, precision: Option<usize>, alt: bool) -> String {
    match conv.to_ascii_lowercase() {
        'f' => {
            let s = format!("{v:.*}", precision.unwrap_or(6));
            if alt && !s.contains('.') {
                s + "."
            } else {
                s
            }
        }
        'e' => exponent_form(v, precision.unwrap_or(6), alt),
        _ => general_form(v, precision.unwrap_or(6), alt),
    }
}

/// `d.ddde±XX` with `precision` digits after the point (and the point
/// even without them if `alt`).
fn exponent_form(v: f64, precision: usize, alt: bool) -> String {
    let s = format!("{v:.precision$e}");
    let (mantissa, exponent) = s.split_once('e').unwrap_or((&s, "0"));
    let e: i32 = exponent.parse().unwrap_or(0);
    let mantissa = if alt && !mantissa.contains('.') {
        format!("{mantissa}.")
    } else {
        mantissa.to_string()
    };
    format!("{mantissa}e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs())
}

/// C's `%g`: `%e` where the exponent is below -4 or at least the
/// precision, else `%f`, trailing zeros and the point removed (unless
/// `#`, which keeps both, and the point even without digits after it).
fn general_form(v: f64, precision: usize, alt: bool) -> String {
    let p = precision.max(1);
    let exponent = if v == 0.0 {
        0
    } else {
        let s = format!("{v:.*e}", p - 1);
        s.split_once('e')
            .and_then(|(_, e)| e.parse::<i32>().ok())
            .unwrap_or(0)
    };
    let text = if exponent < -4 || exponent >= p as i32 {
        exponent_form(v, p - 1, alt)
    } else {
        format!("{v:.*}", (p as i32 - 1 - exponent).max(0) as usize)
    };
    let (number, exp) = match text.find('e') {
        Some(i) => text.split_at(i),
        None => (text.as_str(), ""),
    };
    if alt {
        let point = if number.contains('.') { "" } else { "." };
        return format!("{number}{point}{exp}");
    }
    let number = if number.contains('.') {
        number.trim_end_matches('0').trim_end_matches('.')
    } else {
        number
    };
    format!("{number}{exp}")
}

/// C's `%a` of a finite non-negative `v` as glibc writes a double, after
/// its `0x`: `1.hhhp±d` (`0.hhhp-1022` below the normal range, `0p+0`
/// for zero), the hex digits rounded to `precision` (to nearest, ties to
/// even, a carry reaching the leading digit: `2p+0`), or as many as `v`
/// needs; the point even without digits after it if `alt`.
fn hex_form(v: f64, precision: Option<usize>, alt: bool) -> String {
    let bits = v.to_bits();
    let raw_exponent = ((bits >> 52) & 0x7ff) as i64;
    let fraction = bits & ((1 << 52) - 1);
    let (lead, exponent) = match (raw_exponent, fraction) {
        (0, 0) => (0u64, 0),
        (0, _) => (0, -1022),
        _ => (1, raw_exponent - 1023),
    };
    let (lead, digits) = match precision {
        Some(p) if p < 13 => {
            // The leading digit and the 52 bits after it, rounded to the
            // leading digit and 4 * p bits.
            let kept_bits = 4 * p as u32;
            let drop = 52 - kept_bits;
            let whole = (lead << 52) | fraction;
            let half = 1u64 << (drop - 1);
            let rest = whole & ((1u64 << drop) - 1);
            let mut kept = whole >> drop;
            if rest > half || (rest == half && kept & 1 == 1) {
                kept += 1;
            }
            let digits = kept & ((1u64 << kept_bits) - 1);
            let digits = if p == 0 {
                String::new()
            } else {
                format!("{digits:0p$x}")
            };
            (kept >> kept_bits, digits)
        }
        Some(p) => (lead, format!("{fraction:013x}{}", "0".repeat(p - 13))),
        None => (
            lead,
            format!("{fraction:013x}").trim_end_matches('0').to_string(),
        ),
    };
    let point = if digits.is_empty() && !alt { "" } else { "." };
    format!("{lead}{point}{digits}p{exponent:+}")
}
