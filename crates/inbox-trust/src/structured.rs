//! The RFC 8941 structured-field subset that `Signature-Input`, `Signature` and
//! `Content-Digest` are written in: dictionaries whose members are items or inner lists,
//! with parameters, over integers, decimals, strings, tokens, byte sequences and booleans.
//! It sits at the crate root, below both `content_digest` and `message_signatures`, which
//! each parse and serialize fields with it.
//!
//! Parsing follows RFC 8941 §4.2 step by step (including "a later duplicate key replaces the
//! earlier value in place"), because a verifier that parses more leniently than the signer
//! serialized opens a gap between what was signed and what is checked. Serialization is the
//! canonical form of §4.1, which is what RFC 9421 puts into the `@signature-params` line.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;

/// Longest field value we parse. Real `Signature-Input` values are a few hundred bytes;
/// the limit bounds the work an unauthenticated request can cause before any key is tried.
pub(crate) const FIELD_BYTES_LIMIT: usize = 8 * 1024;

/// Why a field value is not a structured-field dictionary.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StructuredFieldError {
    #[error("field value is {bytes} bytes, more than the {limit}-byte limit")]
    TooLong { bytes: usize, limit: usize },
    #[error("unexpected {found} at byte {at}, expected {expected}")]
    Unexpected { at: usize, found: String, expected: &'static str },
    #[error("integer or decimal at byte {at} has too many digits")]
    NumberTooLong { at: usize },
    #[error("byte sequence at byte {at} is not valid padded base64")]
    InvalidBase64 { at: usize },
}

/// A bare item: the value of a dictionary member, inner-list member or parameter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum BareItem {
    Integer(i64),
    /// Kept in thousandths, which is every digit RFC 8941 allows after the point.
    Decimal(i64),
    String(String),
    Token(String),
    ByteSequence(Vec<u8>),
    Boolean(bool),
}

/// Parameters in the order they were written; a repeated key keeps its first position.
pub(crate) type Parameters = Vec<(String, BareItem)>;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Item {
    pub(crate) bare_item: BareItem,
    pub(crate) parameters: Parameters,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct InnerList {
    pub(crate) items: Vec<Item>,
    pub(crate) parameters: Parameters,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Member {
    Item(Item),
    InnerList(InnerList),
}

/// Dictionary members in order; keys are unique (RFC 8941 §4.2.2 overwrite semantics).
pub(crate) type Dictionary = Vec<(String, Member)>;

/// Parses a whole field value as a dictionary. Several field lines of the same name must
/// be joined with `", "` first (RFC 9110 §5.3), which is what [`RequestParts`] does.
///
/// [`RequestParts`]: crate::message_signatures::RequestParts
pub(crate) fn parse_dictionary(input: &str) -> Result<Dictionary, StructuredFieldError> {
    if input.len() > FIELD_BYTES_LIMIT {
        return Err(StructuredFieldError::TooLong { bytes: input.len(), limit: FIELD_BYTES_LIMIT });
    }
    let mut parser = Parser::new(input);
    parser.skip_spaces();
    let mut dictionary = Dictionary::new();
    if parser.at_end() {
        return Ok(dictionary);
    }
    loop {
        let key = parser.parse_key()?;
        let member = if parser.eat(b'=') {
            parser.parse_item_or_inner_list()?
        } else {
            Member::Item(Item { bare_item: BareItem::Boolean(true), parameters: parser.parse_parameters()? })
        };
        insert_or_replace(&mut dictionary, key, member);
        parser.skip_optional_whitespace();
        if parser.at_end() {
            return Ok(dictionary);
        }
        parser.expect(b',', "a comma between dictionary members")?;
        parser.skip_optional_whitespace();
        if parser.at_end() {
            return Err(parser.unexpected("a dictionary member after the comma"));
        }
    }
}

/// Serializes an inner list with its parameters, canonically (RFC 8941 §4.1.1.1).
pub(crate) fn serialize_inner_list(inner_list: &InnerList) -> String {
    let mut out = String::from("(");
    for (index, item) in inner_list.items.iter().enumerate() {
        if index > 0 {
            out.push(' ');
        }
        serialize_item_into(item, &mut out);
    }
    out.push(')');
    serialize_parameters_into(&inner_list.parameters, &mut out);
    out
}

/// Serializes a byte sequence, `:base64:` (RFC 8941 §4.1.8).
pub(crate) fn serialize_byte_sequence(bytes: &[u8]) -> String {
    format!(":{}:", BASE64.encode(bytes))
}

/// Whether `text` can be an RFC 8941 string: printable ASCII only.
pub(crate) fn is_valid_string(text: &str) -> bool {
    text.bytes().all(|byte| (0x20..=0x7e).contains(&byte))
}

/// Whether `text` can be a dictionary or parameter key (RFC 8941 §3.1.2).
pub(crate) fn is_valid_key(text: &str) -> bool {
    let mut bytes = text.bytes();
    match bytes.next() {
        Some(first) if first.is_ascii_lowercase() || first == b'*' => {}
        _ => return false,
    }
    bytes.all(is_key_byte)
}

fn serialize_item_into(item: &Item, out: &mut String) {
    serialize_bare_item_into(&item.bare_item, out);
    serialize_parameters_into(&item.parameters, out);
}

fn serialize_parameters_into(parameters: &Parameters, out: &mut String) {
    for (key, value) in parameters {
        out.push(';');
        out.push_str(key);
        if *value != BareItem::Boolean(true) {
            out.push('=');
            serialize_bare_item_into(value, out);
        }
    }
}

fn serialize_bare_item_into(bare_item: &BareItem, out: &mut String) {
    match bare_item {
        BareItem::Integer(value) => out.push_str(&value.to_string()),
        BareItem::Decimal(thousandths) => {
            let sign = if *thousandths < 0 { "-" } else { "" };
            let magnitude = thousandths.unsigned_abs();
            let fraction = format!("{:03}", magnitude % 1000);
            let fraction = fraction.trim_end_matches('0');
            let fraction = if fraction.is_empty() { "0" } else { fraction };
            out.push_str(sign);
            out.push_str(&(magnitude / 1000).to_string());
            out.push('.');
            out.push_str(fraction);
        }
        BareItem::String(text) => {
            out.push('"');
            for character in text.chars() {
                if character == '"' || character == '\\' {
                    out.push('\\');
                }
                out.push(character);
            }
            out.push('"');
        }
        BareItem::Token(token) => out.push_str(token),
        BareItem::ByteSequence(bytes) => out.push_str(&serialize_byte_sequence(bytes)),
        BareItem::Boolean(value) => out.push_str(if *value { "?1" } else { "?0" }),
    }
}

fn insert_or_replace<V>(entries: &mut Vec<(String, V)>, key: String, value: V) {
    match entries.iter_mut().find(|(existing, _)| *existing == key) {
        Some(entry) => entry.1 = value,
        None => entries.push((key, value)),
    }
}

fn is_key_byte(byte: u8) -> bool {
    byte.is_ascii_lowercase() || byte.is_ascii_digit() || matches!(byte, b'_' | b'-' | b'.' | b'*')
}

fn is_tchar(byte: u8) -> bool {
    byte.is_ascii_alphanumeric()
        || matches!(
            byte,
            b'!' | b'#'
                | b'$'
                | b'%'
                | b'&'
                | b'\''
                | b'*'
                | b'+'
                | b'-'
                | b'.'
                | b'^'
                | b'_'
                | b'`'
                | b'|'
                | b'~'
        )
}

struct Parser<'a> {
    input: &'a [u8],
    position: usize,
}

impl<'a> Parser<'a> {
    fn new(input: &'a str) -> Self {
        Parser { input: input.as_bytes(), position: 0 }
    }

    fn at_end(&self) -> bool {
        self.position >= self.input.len()
    }

    fn peek(&self) -> Option<u8> {
        self.input.get(self.position).copied()
    }

    fn eat(&mut self, byte: u8) -> bool {
        if self.peek() == Some(byte) {
            self.position += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, byte: u8, expected: &'static str) -> Result<(), StructuredFieldError> {
        if self.eat(byte) { Ok(()) } else { Err(self.unexpected(expected)) }
    }

    fn unexpected(&self, expected: &'static str) -> StructuredFieldError {
        let found = match self.peek() {
            None => "end of input".to_owned(),
            Some(byte) if byte.is_ascii_graphic() => format!("{:?}", byte as char),
            Some(byte) => format!("byte 0x{byte:02x}"),
        };
        StructuredFieldError::Unexpected { at: self.position, found, expected }
    }

    fn skip_spaces(&mut self) {
        while self.peek() == Some(b' ') {
            self.position += 1;
        }
    }

    fn skip_optional_whitespace(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.position += 1;
        }
    }

    fn parse_item_or_inner_list(&mut self) -> Result<Member, StructuredFieldError> {
        if self.peek() == Some(b'(') {
            Ok(Member::InnerList(self.parse_inner_list()?))
        } else {
            Ok(Member::Item(self.parse_item()?))
        }
    }

    fn parse_inner_list(&mut self) -> Result<InnerList, StructuredFieldError> {
        self.expect(b'(', "an opening parenthesis")?;
        let mut items = Vec::new();
        loop {
            self.skip_spaces();
            if self.eat(b')') {
                let parameters = self.parse_parameters()?;
                return Ok(InnerList { items, parameters });
            }
            items.push(self.parse_item()?);
            if !matches!(self.peek(), Some(b' ' | b')')) {
                return Err(self.unexpected("a space or a closing parenthesis"));
            }
        }
    }

    fn parse_item(&mut self) -> Result<Item, StructuredFieldError> {
        let bare_item = self.parse_bare_item()?;
        let parameters = self.parse_parameters()?;
        Ok(Item { bare_item, parameters })
    }

    fn parse_parameters(&mut self) -> Result<Parameters, StructuredFieldError> {
        let mut parameters = Parameters::new();
        while self.eat(b';') {
            self.skip_spaces();
            let key = self.parse_key()?;
            let value = if self.eat(b'=') { self.parse_bare_item()? } else { BareItem::Boolean(true) };
            insert_or_replace(&mut parameters, key, value);
        }
        Ok(parameters)
    }

    fn parse_key(&mut self) -> Result<String, StructuredFieldError> {
        match self.peek() {
            Some(byte) if byte.is_ascii_lowercase() || byte == b'*' => {}
            _ => return Err(self.unexpected("a key (lower-case letter or '*')")),
        }
        let start = self.position;
        while self.peek().is_some_and(is_key_byte) {
            self.position += 1;
        }
        Ok(self.text(start))
    }

    fn parse_bare_item(&mut self) -> Result<BareItem, StructuredFieldError> {
        match self.peek() {
            Some(b'-' | b'0'..=b'9') => self.parse_number(),
            Some(b'"') => self.parse_string(),
            Some(b':') => self.parse_byte_sequence(),
            Some(b'?') => self.parse_boolean(),
            Some(byte) if byte.is_ascii_alphabetic() || byte == b'*' => Ok(self.parse_token()),
            _ => Err(self.unexpected("an item")),
        }
    }

    fn parse_number(&mut self) -> Result<BareItem, StructuredFieldError> {
        let start = self.position;
        let negative = self.eat(b'-');
        let integer_start = self.position;
        while self.peek().is_some_and(|byte| byte.is_ascii_digit()) {
            self.position += 1;
        }
        let integer_digits = self.position - integer_start;
        if integer_digits == 0 {
            return Err(self.unexpected("a digit"));
        }
        let sign = if negative { -1 } else { 1 };
        if !self.eat(b'.') {
            if integer_digits > 15 {
                return Err(StructuredFieldError::NumberTooLong { at: start });
            }
            let value: i64 = self.text(integer_start).parse().unwrap_or(0);
            return Ok(BareItem::Integer(sign * value));
        }
        if integer_digits > 12 {
            return Err(StructuredFieldError::NumberTooLong { at: start });
        }
        let integer: i64 = std::str::from_utf8(&self.input[integer_start..integer_start + integer_digits])
            .unwrap_or("0")
            .parse()
            .unwrap_or(0);
        let fraction_start = self.position;
        while self.peek().is_some_and(|byte| byte.is_ascii_digit()) {
            self.position += 1;
        }
        let fraction_digits = self.position - fraction_start;
        if fraction_digits == 0 {
            return Err(self.unexpected("a digit after the decimal point"));
        }
        if fraction_digits > 3 {
            return Err(StructuredFieldError::NumberTooLong { at: start });
        }
        let fraction_text = format!("{:0<3}", self.text(fraction_start));
        let fraction: i64 = fraction_text.parse().unwrap_or(0);
        Ok(BareItem::Decimal(sign * (integer * 1000 + fraction)))
    }

    fn parse_string(&mut self) -> Result<BareItem, StructuredFieldError> {
        self.expect(b'"', "a double quote")?;
        let mut text = String::new();
        loop {
            match self.peek() {
                None => return Err(self.unexpected("a closing double quote")),
                Some(b'"') => {
                    self.position += 1;
                    return Ok(BareItem::String(text));
                }
                Some(b'\\') => {
                    self.position += 1;
                    match self.peek() {
                        Some(escaped @ (b'"' | b'\\')) => {
                            text.push(escaped as char);
                            self.position += 1;
                        }
                        _ => return Err(self.unexpected("'\"' or '\\' after a backslash")),
                    }
                }
                Some(byte) if (0x20..=0x7e).contains(&byte) => {
                    text.push(byte as char);
                    self.position += 1;
                }
                Some(_) => return Err(self.unexpected("a printable ASCII character")),
            }
        }
    }

    fn parse_token(&mut self) -> BareItem {
        let start = self.position;
        self.position += 1;
        while self.peek().is_some_and(|byte| is_tchar(byte) || byte == b':' || byte == b'/') {
            self.position += 1;
        }
        BareItem::Token(self.text(start))
    }

    fn parse_byte_sequence(&mut self) -> Result<BareItem, StructuredFieldError> {
        let start = self.position;
        self.expect(b':', "a colon")?;
        let content_start = self.position;
        while self
            .peek()
            .is_some_and(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'+' | b'/' | b'='))
        {
            self.position += 1;
        }
        let content = self.text(content_start);
        self.expect(b':', "a closing colon after base64")?;
        BASE64
            .decode(content.as_bytes())
            .map(BareItem::ByteSequence)
            .map_err(|_| StructuredFieldError::InvalidBase64 { at: start })
    }

    fn parse_boolean(&mut self) -> Result<BareItem, StructuredFieldError> {
        self.expect(b'?', "a question mark")?;
        if self.eat(b'1') {
            Ok(BareItem::Boolean(true))
        } else if self.eat(b'0') {
            Ok(BareItem::Boolean(false))
        } else {
            Err(self.unexpected("'0' or '1' after '?'"))
        }
    }

    /// The ASCII text from `start` to the current position. Every caller has checked each
    /// byte is ASCII, so the conversion cannot lose anything.
    fn text(&self, start: usize) -> String {
        String::from_utf8_lossy(&self.input[start..self.position]).into_owned()
    }
}

#[cfg(test)]
mod tests;
