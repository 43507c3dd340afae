//! TLS test fixtures: a throwaway PKI made with the `openssl` command-line tool
//! (Debian's `openssl` package; no crate to compile), and a TLS-terminating
//! front (`stunnel4`) for servers that speak only plain HTTP, such as the
//! Upstash gateway and webdis.
//!
//! Both are real implementations other than the client under test (OpenSSL on
//! the server side, Go's crypto/tls inside etcd), so the tests check
//! interoperability rather than rustls talking to itself.

use std::io;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::port::free_port;
use crate::process::{ProcessGuard, ProcessSpec};
use crate::tempdir::TempDir;

pub const OPENSSL_BIN: &str = "/usr/bin/openssl";
pub const STUNNEL_BIN: &str = "/usr/bin/stunnel4";

/// Extensions for every certificate; written next to the keys.
/// The server certificate also allows `clientAuth`: etcd's JSON gateway dials
/// etcd's own gRPC port with it, and with `--client-cert-auth` that dial must
/// present a client certificate.
const OPENSSL_CNF: &str = "\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = edgelock test
[ca_ext]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[server_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth, clientAuth
subjectAltName = IP:127.0.0.1, IP:::1, DNS:localhost
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
[client_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
";

/// A CA, a server certificate for 127.0.0.1 / ::1 / localhost, a client
/// certificate (CN `edgelock-client`), all signed by that CA, plus a second,
/// unrelated CA (for "wrong CA" tests). EC P-256 keys, PEM (PKCS#8), valid
/// for 7 days from now. The directory is removed on drop.
#[derive(Debug)]
pub struct TestPki {
    dir: TempDir,
}

impl TestPki {
    /// Generates everything with `openssl` (about 0.1 s).
    pub fn generate() -> io::Result<TestPki> {
        let dir = TempDir::new("pki")?;
        let pki = TestPki { dir };
        let d = pki.dir.path();
        std::fs::write(d.join("openssl.cnf"), OPENSSL_CNF)?;
        pki.self_signed_ca("ca", "edgelock test CA")?;
        pki.self_signed_ca("other-ca", "some other CA")?;
        pki.issued("server", "127.0.0.1", "server_ext", "1001")?;
        pki.issued("client", "edgelock-client", "client_ext", "1002")?;
        Ok(pki)
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The CA that signed the server and client certificates.
    pub fn ca_cert(&self) -> PathBuf {
        self.dir().join("ca.pem")
    }

    /// A CA that signed nothing here.
    pub fn other_ca_cert(&self) -> PathBuf {
        self.dir().join("other-ca.pem")
    }

    pub fn server_cert(&self) -> PathBuf {
        self.dir().join("server.pem")
    }

    pub fn server_key(&self) -> PathBuf {
        self.dir().join("server.key")
    }

    pub fn client_cert(&self) -> PathBuf {
        self.dir().join("client.pem")
    }

    pub fn client_key(&self) -> PathBuf {
        self.dir().join("client.key")
    }

    fn openssl(&self, args: &[&str]) -> io::Result<()> {
        let out = Command::new(OPENSSL_BIN)
            .args(args)
            .current_dir(self.dir())
            .stdin(Stdio::null())
            .output()
            .map_err(|e| io::Error::new(e.kind(), format!("cannot run {OPENSSL_BIN}: {e}")))?;
        if !out.status.success() {
            return Err(io::Error::other(format!(
                "openssl {} failed: {}",
                args.first().copied().unwrap_or(""),
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        Ok(())
    }

    fn self_signed_ca(&self, name: &str, cn: &str) -> io::Result<()> {
        let (key, cert, subj) = (
            format!("{name}.key"),
            format!("{name}.pem"),
            format!("/CN={cn}"),
        );
        self.openssl(&[
            "req",
            "-x509",
            "-new",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &key,
            "-out",
            &cert,
            "-days",
            "7",
            "-subj",
            &subj,
            "-config",
            "openssl.cnf",
            "-extensions",
            "ca_ext",
        ])
    }

    fn issued(&self, name: &str, cn: &str, ext: &str, serial: &str) -> io::Result<()> {
        let (key, csr, cert, subj) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.pem"),
            format!("/CN={cn}"),
        );
        self.openssl(&[
            "req",
            "-new",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &key,
            "-out",
            &csr,
            "-subj",
            &subj,
            "-config",
            "openssl.cnf",
        ])?;
        self.openssl(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-set_serial",
            serial,
            "-days",
            "7",
            "-out",
            &cert,
            "-extfile",
            "openssl.cnf",
            "-extensions",
            ext,
        ])
    }
}

/// `stunnel4` accepting TLS on a free loopback port (the [`TestPki`] server
/// certificate) and forwarding plaintext to `127.0.0.1:<backend_port>`.
/// Streaming responses pass through as they arrive. Killed on drop.
#[derive(Debug)]
pub struct TlsFront {
    port: u16,
    proc: ProcessGuard,
    _dir: TempDir,
}

impl TlsFront {
    pub fn start(backend_port: u16, pki: &TestPki) -> io::Result<TlsFront> {
        let mut last = None;
        for _ in 0..3 {
            match TlsFront::try_start(backend_port, pki) {
                Ok(f) => return Ok(f),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("stunnel did not start")))
    }

    fn try_start(backend_port: u16, pki: &TestPki) -> io::Result<TlsFront> {
        let port = free_port()?;
        let dir = TempDir::new(&format!("stunnel-{port}"))?;
        let config = dir.path().join("stunnel.conf");
        // `pid =` (empty): no pid file; `foreground`: logs go to our log file.
        let text = format!(
            "foreground = yes\npid =\ndebug = warning\n\n[front]\naccept = 127.0.0.1:{port}\nconnect = 127.0.0.1:{backend_port}\ncert = {}\nkey = {}\n",
            pki.server_cert().display(),
            pki.server_key().display()
        );
        std::fs::write(&config, text)?;
        let spec = ProcessSpec::new(STUNNEL_BIN, dir.path().join("stunnel.log"))
            .arg(&config)
            .cleanup_dir(dir.path());
        let mut proc = ProcessGuard::spawn(spec)?;
        proc.wait_ready("stunnel", Duration::from_secs(10), || {
            TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(200))
                .is_ok()
        })?;
        Ok(TlsFront {
            port,
            proc,
            _dir: dir,
        })
    }

    /// `https://127.0.0.1:<port>`
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn pid(&self) -> Option<u32> {
        self.proc.pid()
    }
}
