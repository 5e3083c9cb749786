//! Value parsers for clap that the experiments and the `thor` shell share: each refuses a bad
//! value at the flag, with its name, rather than deep inside a cache or an engine.

/// A `--seconds` value: a positive, finite number of seconds (clap's value parser).
pub fn positive_seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        Ok(_) => Err(format!("{s} is not a positive number of seconds")),
        Err(e) => Err(format!("{s}: {e}")),
    }
}

/// A size (`--cache-mb`, `--sizes-mb`, ...): a positive, finite number, fractions allowed
/// (clap's value parser). Zero, negative and NaN sizes are refused here, with the flag's name,
/// rather than deep inside a cache or an engine.
pub fn positive_size(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        Ok(_) => Err(format!("{s} is not a positive size")),
        Err(e) => Err(format!("{s}: {e}")),
    }
}

/// A `--page-kb` value: a page size in KiB that the page format allows (clap's value parser),
/// checked before anything is created.
pub fn page_kb(s: &str) -> Result<usize, String> {
    use thor_core::limits::{PAGE_SIZE_MAX, PAGE_SIZE_MIN, is_valid_page_size};
    match s.parse::<i64>() {
        Ok(v) if v > 0 && is_valid_page_size((v as usize).saturating_mul(1024)) => Ok(v as usize),
        Ok(_) => Err(format!(
            "{s} is not a page size: a power of two from {} to {} KiB",
            PAGE_SIZE_MIN / 1024,
            PAGE_SIZE_MAX / 1024
        )),
        Err(e) => Err(format!("{s}: {e}")),
    }
}

/// A count or whole size that must be at least 1 (`--clients`, `--repeat`, `--bulk-mb`, ...;
/// clap's value parser).
pub fn at_least_one<T: TryFrom<i64, Error: std::fmt::Display>>(s: &str) -> Result<T, String> {
    match s.parse::<i64>() {
        Ok(v) if v >= 1 => T::try_from(v).map_err(|e| format!("{s}: {e}")),
        Ok(_) => Err(format!("{s} is not a count of at least 1")),
        Err(e) => Err(format!("{s}: {e}")),
    }
}

/// A server's addresses on a client's command line: one, or its replica group's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Addrs {
    /// One address.
    One(std::net::SocketAddr),
    /// Each replica's id and address (`thor_client::group`).
    Group(Vec<(u64, std::net::SocketAddr)>),
}

/// `HOST:PORT`, or a replica group `R=HOST:PORT,R=HOST:PORT,...` (`thor_client::ServerAddr`),
/// every address resolved now (`--connect` of the transfer client).
pub fn parse_addrs(s: &str) -> Result<Addrs, String> {
    use std::net::ToSocketAddrs;
    let resolve = |addr: &str| {
        addr.to_socket_addrs()
            .map_err(|e| format!("{addr}: {e}"))?
            .next()
            .ok_or_else(|| format!("{addr} names no address"))
    };
    match thor_client::ServerAddr::parse(s)? {
        thor_client::ServerAddr::One(a) => Ok(Addrs::One(resolve(&a)?)),
        thor_client::ServerAddr::Group(replicas) => Ok(Addrs::Group(
            replicas.iter().map(|(id, a)| Ok((*id, resolve(a)?))).collect::<Result<_, String>>()?,
        )),
    }
}

/// `--server ID=ADDRS` (the cluster client): a server's id, then its address or its replica
/// group ([`parse_addrs`]): `2=127.0.0.1:7401`, `2=21=127.0.0.1:7401,22=127.0.0.1:7402`.
pub fn parse_server_group(s: &str) -> Result<(u32, Addrs), String> {
    let (id, addrs) = s
        .split_once('=')
        .ok_or("expected ID=HOST:PORT or ID=R=HOST:PORT,R=HOST:PORT,..., e.g. 2=127.0.0.1:7401")?;
    let id: u32 = id.trim().parse().map_err(|_| format!("server id {id:?} is not a number"))?;
    if id == 0 {
        return Err("server ids start at 1".into());
    }
    Ok((id, parse_addrs(addrs)?))
}

/// `--peer ID=HOST:PORT` (`thor server`).
pub fn parse_peer(s: &str) -> Result<(u32, std::net::SocketAddr), String> {
    let (id, addr) = s.split_once('=').ok_or("expected ID=HOST:PORT, e.g. 2=127.0.0.1:7401")?;
    let id: u32 = id.trim().parse().map_err(|_| format!("server id {id:?} is not a number"))?;
    if id == 0 {
        return Err("server ids start at 1".into());
    }
    use std::net::ToSocketAddrs;
    let addr = addr
        .trim()
        .to_socket_addrs()
        .map_err(|e| format!("{addr}: {e}"))?
        .next()
        .ok_or_else(|| format!("{addr} names no address"))?;
    Ok((id, addr))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_address_is_one_server_or_a_replica_group() {
        let one: std::net::SocketAddr = "127.0.0.1:7401".parse().unwrap();
        let two: std::net::SocketAddr = "127.0.0.1:7402".parse().unwrap();
        assert_eq!(parse_addrs("127.0.0.1:7401"), Ok(Addrs::One(one)));
        assert_eq!(
            parse_addrs("1=127.0.0.1:7401,2=127.0.0.1:7402"),
            Ok(Addrs::Group(vec![(1, one), (2, two)]))
        );
        assert_eq!(parse_server_group("3=127.0.0.1:7401"), Ok((3, Addrs::One(one))));
        assert_eq!(
            parse_server_group("3=31=127.0.0.1:7401,32=127.0.0.1:7402"),
            Ok((3, Addrs::Group(vec![(31, one), (32, two)])))
        );
        for bad in ["1=127.0.0.1:7401,127.0.0.1:7402", "0=127.0.0.1:7401", "x=127.0.0.1:1"] {
            assert!(parse_server_group(bad).is_err(), "{bad}");
        }
        assert!(
            parse_server_group("2=1=127.0.0.1:7401,1=127.0.0.1:7402").is_err(),
            "a replica twice"
        );
    }
}
