//! Secrets shown masked: what every part of the gateway that prints a
//! configured value (a configuration problem, `check-config --print`, a
//! start-up line, the relay's store) shares, so a password or token in a
//! URL is hidden the same way everywhere. Below everything; uses nothing of
//! the gateway.

/// What a set secret prints as.
pub const MASK: &str = "********";

/// A key holds a secret when its name says so (`service_key`, `…_token`,
/// `…secret…`, `…password…`).
pub fn is_secret(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    key == "key"
        || key.ends_with("_key")
        || key.ends_with("token")
        || key.contains("secret")
        || key.contains("password")
}

/// `text` as it may be shown in a message, a log line or `--print`, whether
/// or not it parses as a URL: a password in its userinfo
/// (`postgres://user:pw@host` → `postgres://user:********@host`), userinfo
/// without one (a token as the user name: `https://********@host`), and the
/// value of every query parameter whose name says secret (`?password=…`,
/// PostgreSQL's `sslpassword`, `…token…`, `…key…`) masked; so too
/// `password=…` in a PostgreSQL key/value connection string.
pub fn mask_url(text: &str) -> String {
    // No scheme: a key/value connection string, or a URL without its
    // scheme (`user:pw@proxy:3128`, as proxy variables are often set).
    let (scheme, rest) = match text.split_once("://") {
        Some((scheme, rest)) => (Some(scheme), rest),
        None if text.contains('=') => return mask_key_values(text),
        None => (None, text),
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{user}:{MASK}@{host}"),
            None => format!("{MASK}@{host}"),
        },
        None => authority.to_owned(),
    };
    let (path, fragment) = match tail.split_once('#') {
        Some((path, fragment)) => (path, Some(fragment)),
        None => (tail, None),
    };
    let mut shown = match scheme {
        Some(scheme) => format!("{scheme}://{authority}"),
        None => authority,
    };
    match path.split_once('?') {
        Some((path, query)) => {
            shown.push_str(path);
            shown.push('?');
            let pairs: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((name, value)) if is_secret_parameter(name) && !value.is_empty() => {
                        format!("{name}={MASK}")
                    }
                    _ => pair.to_owned(),
                })
                .collect();
            shown.push_str(&pairs.join("&"));
        }
        None => shown.push_str(path),
    }
    if let Some(fragment) = fragment {
        shown.push('#');
        shown.push_str(fragment);
    }
    shown
}

/// A query parameter (or connection-string key) that carries a secret.
fn is_secret_parameter(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    is_secret(&name) || name.contains("passw") || name == "pwd" || name.contains("key")
}

/// `host=db password=pw` → `host=db password=********`: the secret values
/// of a key/value connection string, a quoted one to its closing quote.
fn mask_key_values(text: &str) -> String {
    let mut shown = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(eq) = rest.find('=') {
        let name_start = rest[..eq]
            .rfind(|c: char| c.is_whitespace())
            .map_or(0, |i| i + 1);
        let name = rest[name_start..eq].trim();
        let value = &rest[eq + 1..];
        let value_len = if let Some(quoted) = value.strip_prefix('\'') {
            quoted.find('\'').map_or(value.len(), |i| i + 2)
        } else {
            value.find(char::is_whitespace).unwrap_or(value.len())
        };
        shown.push_str(&rest[..=eq]);
        if is_secret_parameter(name) && value_len > 0 {
            shown.push_str(MASK);
        } else {
            shown.push_str(&value[..value_len]);
        }
        rest = &value[value_len..];
    }
    shown.push_str(rest);
    shown
}
