//! RFC 8941 parsing and serialization cases, including the fields RFC 9421's examples use.

use super::*;
use proptest::prelude::*;

fn string_item(text: &str) -> Item {
    Item { bare_item: BareItem::String(text.to_owned()), parameters: Vec::new() }
}

#[test]
fn parses_a_signature_input_dictionary() {
    let dictionary =
        parse_dictionary(r#"sig1=("@method" "@path");created=1618884473;keyid="k", sig2=();nonce="n""#)
            .unwrap();
    assert_eq!(dictionary.len(), 2);
    let (label, Member::InnerList(inner_list)) = &dictionary[0] else { panic!("expected an inner list") };
    assert_eq!(label, "sig1");
    assert_eq!(inner_list.items, vec![string_item("@method"), string_item("@path")]);
    assert_eq!(
        inner_list.parameters,
        vec![
            ("created".to_owned(), BareItem::Integer(1_618_884_473)),
            ("keyid".to_owned(), BareItem::String("k".to_owned())),
        ]
    );
}

#[test]
fn parses_every_bare_item_kind() {
    let dictionary =
        parse_dictionary(r#"a=1, b=-2.5, c="x\"y", d=tok/en:1, e=:AQI=:, f=?0, g, h;p=?1"#).unwrap();
    let bare = |index: usize| match &dictionary[index].1 {
        Member::Item(item) => item.bare_item.clone(),
        Member::InnerList(_) => panic!("expected an item"),
    };
    assert_eq!(bare(0), BareItem::Integer(1));
    assert_eq!(bare(1), BareItem::Decimal(-2500));
    assert_eq!(bare(2), BareItem::String("x\"y".to_owned()));
    assert_eq!(bare(3), BareItem::Token("tok/en:1".to_owned()));
    assert_eq!(bare(4), BareItem::ByteSequence(vec![1, 2]));
    assert_eq!(bare(5), BareItem::Boolean(false));
    assert_eq!(bare(6), BareItem::Boolean(true));
    assert_eq!(bare(7), BareItem::Boolean(true));
}

#[test]
fn a_repeated_key_replaces_the_value_in_its_first_position() {
    let dictionary = parse_dictionary("a=1, b=2, a=3").unwrap();
    assert_eq!(
        dictionary,
        vec![
            ("a".to_owned(), Member::Item(Item { bare_item: BareItem::Integer(3), parameters: vec![] })),
            ("b".to_owned(), Member::Item(Item { bare_item: BareItem::Integer(2), parameters: vec![] })),
        ]
    );
}

#[test]
fn refuses_malformed_values() {
    for input in [
        "a=1,",
        "a=1,,b=2",
        "A=1",
        "a=(\"x\"",
        "a=(\"x\"\"y\")",
        "a=\"unterminated",
        "a=\"bad\\escape\"",
        "a=:not base64!:",
        "a=:AQI:",
        "a=?2",
        "a=1234567890123456",
        "a=1.2345",
        "a=1.",
        "a=-",
        "a=1 b=2",
        "a=\"tab\there\"",
    ] {
        assert!(parse_dictionary(input).is_err(), "{input:?} should be refused");
    }
}

#[test]
fn refuses_values_over_the_limit() {
    let input = format!("a=\"{}\"", "x".repeat(FIELD_BYTES_LIMIT));
    assert!(matches!(parse_dictionary(&input), Err(StructuredFieldError::TooLong { .. })));
}

#[test]
fn surrounding_and_separating_whitespace_is_allowed() {
    assert_eq!(parse_dictionary("  a=1 ,\tb=2  ").unwrap().len(), 2);
    assert_eq!(parse_dictionary("").unwrap(), Vec::new());
}

#[test]
fn serializes_canonically() {
    let inner_list = InnerList {
        items: vec![
            string_item("@method"),
            Item {
                bare_item: BareItem::String("@query-param".to_owned()),
                parameters: vec![("name".to_owned(), BareItem::String("Pet".to_owned()))],
            },
        ],
        parameters: vec![
            ("created".to_owned(), BareItem::Integer(1)),
            ("flag".to_owned(), BareItem::Boolean(true)),
            ("off".to_owned(), BareItem::Boolean(false)),
            ("d".to_owned(), BareItem::Decimal(1500)),
            ("q".to_owned(), BareItem::String("a\"b\\c".to_owned())),
        ],
    };
    assert_eq!(
        serialize_inner_list(&inner_list),
        r#"("@method" "@query-param";name="Pet");created=1;flag;off=?0;d=1.5;q="a\"b\\c""#
    );
}

fn arbitrary_bare_item() -> impl Strategy<Value = BareItem> {
    prop_oneof![
        (-999_999_999_999_999_i64..=999_999_999_999_999).prop_map(BareItem::Integer),
        (-999_999_999_999_999_i64..=999_999_999_999_999).prop_map(BareItem::Decimal),
        "[ -~]{0,20}".prop_map(BareItem::String),
        "[A-Za-z*][A-Za-z0-9:/!#$%&'*+.^_`|~-]{0,10}".prop_map(BareItem::Token),
        proptest::collection::vec(any::<u8>(), 0..40).prop_map(BareItem::ByteSequence),
        any::<bool>().prop_map(BareItem::Boolean),
    ]
}

fn arbitrary_parameters() -> impl Strategy<Value = Parameters> {
    proptest::collection::vec(("[a-z*][a-z0-9_.*-]{0,6}", arbitrary_bare_item()), 0..4).prop_map(|pairs| {
        let mut parameters = Parameters::new();
        for (key, value) in pairs {
            insert_or_replace(&mut parameters, key, value);
        }
        parameters
    })
}

proptest! {
    #[test]
    fn an_inner_list_survives_serialization_and_parsing(
        items in proptest::collection::vec((arbitrary_bare_item(), arbitrary_parameters()), 0..5),
        parameters in arbitrary_parameters(),
    ) {
        let inner_list = InnerList {
            items: items
                .into_iter()
                .map(|(bare_item, parameters)| Item { bare_item, parameters })
                .collect(),
            parameters,
        };
        let text = format!("label={}", serialize_inner_list(&inner_list));
        let parsed = parse_dictionary(&text).unwrap();
        prop_assert_eq!(parsed, vec![("label".to_owned(), Member::InnerList(inner_list))]);
    }

    #[test]
    fn parsing_never_panics(input in "\\PC{0,80}") {
        let _ = parse_dictionary(&input);
    }
}
