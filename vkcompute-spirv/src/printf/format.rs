//! `debugPrintfEXT` format strings: parsed when a kernel loads (against
//! the types of the call's arguments), formatted on the host from the
//! words a record holds, as C's `printf` formats (the conversions
//! `GL_EXT_debug_printf` defines: `%d %i %u %x %X %o %c` for integers,
//! `%f %F %e %E %g %G %a %A` for floats, `%s` for string literals, `%%`,
//! with flags `- + space # 0`, a width and a precision, `l` for 64-bit
//! integers, and `%vN` for vectors of N components, printed `, `-separated).

use std::fmt::Write as _;

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

/// Parses `format` against the call's `args`; the error says what does
/// not match (an unknown conversion, a count or a type that differs).
pub fn parse(format: &str, args: &[Arg]) -> Result<Format, String> {
    let mut pieces = Vec::new();
    let mut text = String::new();
    let mut args = args.iter().enumerate();
    let mut chars = format.chars().peekable();
    let mut index = 0usize;
    while let Some(c) = chars.next() {
        if c != '%' {
            text.push(c);
            continue;
        }
        if chars.peek() == Some(&'%') {
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
        while let Some(&f) = chars.peek() {
            if "-+ #0".contains(f) {
                conv.flags.push(f);
                chars.next();
            } else {
                break;
            }
        }
        let number = |chars: &mut std::iter::Peekable<std::str::Chars<'_>>| {
            let mut digits = String::new();
            while let Some(&d) = chars.peek() {
                if d.is_ascii_digit() && digits.len() < 4 {
                    digits.push(d);
                    chars.next();
                } else {
                    break;
                }
            }
            digits.parse::<usize>().ok()
        };
        conv.width = number(&mut chars);
        if chars.peek() == Some(&'.') {
            chars.next();
            conv.precision = Some(number(&mut chars).unwrap_or(0));
        }
        if chars.peek() == Some(&'v') {
            chars.next();
            conv.vector = match chars.next() {
                Some(n @ '2'..='4') => n as u32 - '0' as u32,
                other => {
                    return Err(format!(
                        "conversion {index} has a vector size {other:?}; `%v` takes 2, 3 or 4"
                    ))
                }
            };
        }
        if chars.peek() == Some(&'l') {
            chars.next();
            conv.long = true;
        }
        conv.conversion = chars
            .next()
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
            ('s', Arg::Text(s)) => text.push_str(s),
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
    let zero = c.flags.contains('0') && !left;
    let alt = c.flags.contains('#');
    let sign = if c.flags.contains('+') {
        "+"
    } else if c.flags.contains(' ') {
        " "
    } else {
        ""
    };
    let (negative, body) = match c.conversion {
        // The record's bits as the conversion reads them, whatever the
        // argument's signedness (as C does).
        'd' | 'i' => {
            let v = crate::eval::sign_extend(bits, t.width);
            (
                v < 0,
                integer_digits(v.unsigned_abs(), 10, false, c.precision),
            )
        }
        'u' => (false, integer_digits(bits, 10, false, c.precision)),
        'x' | 'X' => {
            let digits = integer_digits(bits, 16, c.conversion == 'X', c.precision);
            let prefix = if alt && bits != 0 {
                if c.conversion == 'X' {
                    "0X"
                } else {
                    "0x"
                }
            } else {
                ""
            };
            (false, format!("{prefix}{digits}"))
        }
        'o' => {
            let digits = integer_digits(bits, 8, false, c.precision);
            let digits = if alt && !digits.starts_with('0') {
                format!("0{digits}")
            } else {
                digits
            };
            (false, digits)
        }
        'c' => (
            false,
            char::from_u32(bits as u32 & 0x10_ffff)
                .unwrap_or(char::REPLACEMENT_CHARACTER)
                .to_string(),
        ),
        conv => {
            let v = match t.width {
                16 => half::f16::from_bits(bits as u16).to_f64(),
                32 => f64::from(f32::from_bits(bits as u32)),
                _ => f64::from_bits(bits),
            };
            (
                v.is_sign_negative() && !v.is_nan(),
                float_body(conv, v.abs(), c.precision, alt),
            )
        }
    };
    let signed = matches!(c.conversion, 'd' | 'i') || "fFeEgGaA".contains(c.conversion);
    let sign = if negative {
        "-"
    } else if signed {
        sign
    } else {
        ""
    };
    let finite = body.chars().next().is_some_and(|d| d.is_ascii_digit());
    // `0` pads numbers after their sign (not with a precision for integers).
    let zero_pads = zero && finite && (c.precision.is_none() || "fFeEgGaA".contains(c.conversion));
    let len = sign.len() + body.chars().count();
    let width = c.width.unwrap_or(0);
    if len >= width {
        return format!("{sign}{body}");
    }
    let pad = width - len;
    if left {
        format!("{sign}{body}{}", " ".repeat(pad))
    } else if zero_pads {
        // After a `0x` prefix, as C does.
        let (prefix, rest) = if body.starts_with("0x") || body.starts_with("0X") {
            body.split_at(2)
        } else {
            ("", body.as_str())
        };
        format!("{sign}{prefix}{}{rest}", "0".repeat(pad))
    } else {
        format!("{}{sign}{body}", " ".repeat(pad))
    }
}

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

/// A non-negative float (or NaN) under conversion `conv`, without sign.
fn float_body(conv: char, v: f64, precision: Option<usize>, alt: bool) -> String {
    let upper = conv.is_ascii_uppercase();
    let text = if v.is_nan() {
        "nan".to_string()
    } else if v.is_infinite() {
        "inf".to_string()
    } else {
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
            'g' => general_form(v, precision.unwrap_or(6), alt),
            _ => hex_form(v, precision),
        }
    };
    if upper {
        text.to_ascii_uppercase()
    } else {
        text
    }
}

/// `d.ddde±XX` with `precision` digits after the point.
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
/// precision, else `%f`, trailing zeros removed (unless `#`).
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
    if alt {
        return text;
    }
    let (number, exp) = match text.find('e') {
        Some(i) => text.split_at(i),
        None => (text.as_str(), ""),
    };
    let number = if number.contains('.') {
        number.trim_end_matches('0').trim_end_matches('.')
    } else {
        number
    };
    format!("{number}{exp}")
}

/// C's `%a`: `0x1.hhhp±d`.
fn hex_form(v: f64, precision: Option<usize>) -> String {
    if v == 0.0 {
        return match precision {
            Some(p) if p > 0 => format!("0x0.{}p+0", "0".repeat(p)),
            _ => "0x0p+0".to_string(),
        };
    }
    let bits = v.to_bits();
    let raw_exponent = ((bits >> 52) & 0x7ff) as i64;
    let mut mantissa = bits & ((1 << 52) - 1);
    let (lead, exponent) = if raw_exponent == 0 {
        (0u64, -1022)
    } else {
        (1u64, raw_exponent - 1023)
    };
    let mut lead = lead;
    let digits = match precision {
        Some(p) if p < 13 => {
            // Round the 52 mantissa bits to 4 * p, to nearest even.
            let drop = 52 - 4 * p as u32;
            let half = 1u64 << (drop - 1);
            let rest = mantissa & ((1u64 << drop) - 1);
            let mut kept = mantissa >> drop;
            if rest > half || (rest == half && kept & 1 == 1) {
                kept += 1;
                if p == 0 || kept >> (4 * p) != 0 {
                    lead += 1;
                    kept &= (1u64 << (4 * p)).wrapping_sub(1);
                }
            }
            mantissa = kept;
            if p == 0 {
                String::new()
            } else {
                format!("{mantissa:0width$x}", width = p)
            }
        }
        Some(p) => format!("{:013x}{}", mantissa, "0".repeat(p - 13)),
        None => format!("{mantissa:013x}").trim_end_matches('0').to_string(),
    };
    let point = if digits.is_empty() { "" } else { "." };
    let mut text = String::new();
    let _ = write!(text, "0x{lead}{point}{digits}p{exponent:+}");
    text
}
