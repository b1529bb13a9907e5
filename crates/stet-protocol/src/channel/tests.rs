//! Unit tests of `crate::channel`, in a file of their own so the module reads as code.

use super::*;

fn rows(rows: &[&str]) -> Vec<String> {
    rows.iter().map(|row| (*row).to_owned()).collect()
}

#[test]
fn the_model_channel_is_the_gateways_socket_on_its_port() {
    let model = Channel::model();
    assert_eq!(model.name(), "model");
    assert_eq!(model.port(), 4141);
    assert_eq!(model.socket_name(), "model.sock");
    assert_eq!(model.address().to_string(), "127.0.0.1:4141");
    assert!(model.address().ip().is_loopback());
    assert_eq!(Channel::parse("model=4141").unwrap(), model);
}

#[test]
fn a_table_goes_to_the_command_line_and_back() {
    let table = ChannelTable::new(
        Transport::SocketDir("/run/stet".into()),
        vec![Channel::model(), Channel::new("egress_2", 3128).unwrap()],
    );
    let args = table.args();
    assert_eq!(
        args,
        [
            "--socket-dir",
            "/run/stet",
            "--channel",
            "model=4141",
            "--channel",
            "egress_2=3128"
        ]
    );
    let parsed =
        ChannelTable::parse(Path::new(&args[1]), &[args[3].clone(), args[5].clone()]).unwrap();
    assert_eq!(parsed, table);
    let second = parsed.get("egress_2").unwrap();
    assert_eq!(second.port(), 3128);
    assert_eq!(
        parsed.endpoint(second).unwrap(),
        Path::new("/run/stet/egress_2.sock")
    );
    assert_eq!(
        parsed.endpoint(parsed.get("model").unwrap()).unwrap(),
        Path::new("/run/stet/model.sock")
    );
    assert!(parsed.get("egress").is_none());
    assert_eq!(
        parsed.transport(),
        &Transport::SocketDir("/run/stet".into())
    );
}

#[test]
fn a_name_that_is_not_a_fixed_identifier_is_refused() {
    let longest = "a".repeat(MAX_NAME_BYTES);
    assert!(Channel::new(&longest, 1).is_ok());
    let too_long = "a".repeat(MAX_NAME_BYTES + 1);
    for name in [
        "",
        "Model",
        "1model",
        "_model",
        "model.sock",
        "../model",
        "mo/del",
        "mo del",
        "mödel",
        "mo-del",
        "model\0",
        too_long.as_str(),
    ] {
        let error = Channel::new(name, 4141).unwrap_err();
        assert!(
            matches!(error, ChannelError::Name { .. }),
            "{name:?}: {error:?}"
        );
        let row = format!("{name}=4141");
        let error = Channel::parse(&row).unwrap_err();
        assert!(
            matches!(error, ChannelError::Name { .. }),
            "{row:?}: {error:?}"
        );
        assert!(error.to_string().contains(&format!("{name:?}")), "{error}");
    }
}

#[test]
fn a_port_or_row_outside_the_format_is_refused() {
    for row in [
        "model=0",
        "model=65536",
        "model=",
        "model=-1",
        "model=41 41",
        "model=0x10",
    ] {
        let error = Channel::parse(row).unwrap_err();
        assert!(
            matches!(error, ChannelError::Port { .. }),
            "{row:?}: {error:?}"
        );
        assert!(error.to_string().contains(row), "{error}");
    }
    assert!(matches!(
        Channel::new("model", 0),
        Err(ChannelError::Port { .. })
    ));
    for row in ["model", "", "4141"] {
        assert_eq!(
            Channel::parse(row),
            Err(ChannelError::Row {
                row: row.to_owned()
            })
        );
    }
}

#[test]
fn a_table_refuses_a_name_or_a_port_twice_and_a_relative_directory() {
    let dir = Path::new("/run/stet");
    assert_eq!(
        ChannelTable::parse(dir, &rows(&["model=4141", "model=4142"])),
        Err(ChannelError::DuplicateName {
            name: "model".to_owned()
        })
    );
    assert_eq!(
        ChannelTable::parse(dir, &rows(&["model=4141", "egress=4141"])),
        Err(ChannelError::DuplicatePort {
            port: 4141,
            first: "model".to_owned(),
            second: "egress".to_owned()
        })
    );
    assert!(matches!(
        ChannelTable::parse(dir, &rows(&["model=4141", "egress"])),
        Err(ChannelError::Row { .. })
    ));
    assert_eq!(
        ChannelTable::parse(Path::new("run/stet"), &rows(&["model=4141"])),
        Err(ChannelError::Transport {
            path: "run/stet".into()
        })
    );
    let empty = ChannelTable::parse(dir, &[]).unwrap();
    assert!(empty.channels().is_empty());
}

#[test]
fn a_stdio_table_goes_to_the_command_line_and_back_with_no_endpoint() {
    let table = ChannelTable::new(Transport::Stdio, vec![Channel::model(), Channel::egress()]);
    let args = table.args();
    assert_eq!(
        args,
        [
            "--stdio",
            "--channel",
            "model=4141",
            "--channel",
            "egress=4142"
        ]
    );
    let parsed = ChannelTable::parse_stdio(&[args[2].clone(), args[4].clone()]).unwrap();
    assert_eq!(parsed, table);
    assert_eq!(parsed.endpoint(&Channel::model()), None);
    assert_eq!(parsed.names(), ["model", "egress"]);
    assert!(matches!(
        ChannelTable::parse_stdio(&rows(&["model=4141", "model=1"])),
        Err(ChannelError::DuplicateName { .. })
    ));
}
