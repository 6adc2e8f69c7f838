//! The control-plane components of the test bed
//! (tests/it/common/testbed.rs) as kubeadm would run them: kube-apiserver's
//! flags, each component's command from the bed's binaries with a test's
//! extra flags, its health endpoint, and a kube-apiserver,
//! kube-controller-manager or kube-scheduler started and waited for.

use super::*;

impl ControlPlane {
    /// The flags kubeadm gives kube-apiserver (its static pod manifest),
    /// for 127.0.0.1.
    fn apiserver_args(&self, port: u16, etcd_prefix: &str) -> Vec<(String, String)> {
        let p = |f: &str| self.pki_file(f);
        [
            ("advertise-address", "127.0.0.1".to_string()),
            ("bind-address", "127.0.0.1".into()),
            ("secure-port", port.to_string()),
            ("allow-privileged", "true".into()),
            ("authorization-mode", "Node,RBAC".into()),
            ("client-ca-file", p("ca.crt")),
            ("enable-admission-plugins", "NodeRestriction".into()),
            ("enable-bootstrap-token-auth", "true".into()),
            ("etcd-cafile", p("etcd/ca.crt")),
            ("etcd-certfile", p("apiserver-etcd-client.crt")),
            ("etcd-keyfile", p("apiserver-etcd-client.key")),
            ("etcd-servers", self.etcd_url.clone()),
            ("etcd-prefix", etcd_prefix.into()),
            ("kubelet-client-certificate", p("apiserver-kubelet-client.crt")),
            ("kubelet-client-key", p("apiserver-kubelet-client.key")),
            (
                "kubelet-preferred-address-types",
                "InternalIP,ExternalIP,Hostname".into(),
            ),
            ("proxy-client-cert-file", p("front-proxy-client.crt")),
            ("proxy-client-key-file", p("front-proxy-client.key")),
            ("requestheader-allowed-names", "front-proxy-client".into()),
            ("requestheader-client-ca-file", p("front-proxy-ca.crt")),
            ("requestheader-extra-headers-prefix", "X-Remote-Extra-".into()),
            ("requestheader-group-headers", "X-Remote-Group".into()),
            ("requestheader-username-headers", "X-Remote-User".into()),
            (
                "service-account-issuer",
                "https://kubernetes.default.svc.cluster.local".into(),
            ),
            ("service-account-key-file", p("sa.pub")),
            ("service-account-signing-key-file", p("sa.key")),
            ("service-cluster-ip-range", "10.96.0.0/12".into()),
            ("tls-cert-file", p("apiserver.crt")),
            ("tls-private-key-file", p("apiserver.key")),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    /// kubeadm's flags with `extra` merged over them (as kubeadm merges
    /// `extraArgs`: an extra flag replaces the default of the same name).
    fn command(&self, binary: &str, base: Vec<(String, String)>, extra: &[(String, String)]) -> Command {
        // As kubeadm v1beta4 merges: an extra flag replaces the base flag of
        // its name, and a flag given twice in `extra` (the service-account
        // issuers) is passed twice.
        let mut args = base;
        args.retain(|(bk, _)| !extra.iter().any(|(k, _)| k == bk));
        args.extend(extra.iter().cloned());
        let mut c = Command::new(self.bin.join(binary));
        c.args(args.iter().map(|(k, v)| format!("--{k}={v}")));
        c
    }

    /// Is `path` on the HTTPS server at `port` answering "ok"? With a
    /// kubeconfig, as its user (kubectl); without, anonymously (curl, as the
    /// kubelet's probes of kubeadm's static pods do).
    fn healthy(&self, port: u16, path: &str, kubeconfig: Option<&Path>) -> bool {
        let c = match kubeconfig {
            Some(kc) => {
                let mut c = Command::new(self.bin.join("kubectl"));
                c.arg("--kubeconfig")
                    .arg(kc)
                    .args(["get", "--raw", path, "--request-timeout=5s"]);
                c
            }
            None => {
                let mut c = Command::new("curl");
                c.args(["-sk", "--max-time", "5", &format!("https://127.0.0.1:{port}{path}")]);
                c
            }
        };
        matches!(run(c), Ok(out) if out.trim() == "ok")
    }

    /// A kube-apiserver on `port` sharing this control plane's etcd and PKI,
    /// with `extra` flags, waited for until its /readyz is ok. Err with its
    /// log if it exits (a bad flag) or is not ready in time.
    pub fn apiserver_proc(
        &self,
        name: &str,
        port: u16,
        extra: &[(String, String)],
        etcd_prefix: &str,
    ) -> Result<Proc, String> {
        let c = self.command("kube-apiserver", self.apiserver_args(port, etcd_prefix), extra);
        let mut proc = Proc::spawn(name, c, self.path(&format!("{name}.log")));
        let kc = self.kubeconfig_for("super-admin.conf", port);
        proc.wait_until(READY_LIMIT, || self.healthy(port, "/readyz", Some(&kc)))?;
        Ok(proc)
    }

    /// kubeadm's kubeconfig `file` (e.g. `super-admin.conf`) pointed at the API server on `port`.
    pub fn kubeconfig_for(&self, file: &str, port: u16) -> PathBuf {
        let path = self.path(&format!("{port}-{file}"));
        if !path.exists() {
            let text = std::fs::read_to_string(self.path(file)).unwrap();
            let text = text.replace(&format!("127.0.0.1:{}", self.api_port), &format!("127.0.0.1:{port}"));
            std::fs::write(&path, text).unwrap();
        }
        path
    }

    /// kube-controller-manager for the API server on `api_port`, with kubeadm's
    /// flags and `extra`, waited for until its /healthz is ok.
    pub fn controller_manager_proc(
        &self,
        name: &str,
        api_port: u16,
        extra: &[(String, String)],
    ) -> Result<Proc, String> {
        let port = free_port();
        let kc = self
            .kubeconfig_for("controller-manager.conf", api_port)
            .display()
            .to_string();
        let p = |f: &str| self.pki_file(f);
        let base = [
            ("authentication-kubeconfig", kc.clone()),
            ("authorization-kubeconfig", kc.clone()),
            ("kubeconfig", kc),
            ("bind-address", "127.0.0.1".into()),
            ("secure-port", port.to_string()),
            ("client-ca-file", p("ca.crt")),
            ("cluster-name", "testbed".into()),
            ("cluster-signing-cert-file", p("ca.crt")),
            ("cluster-signing-key-file", p("ca.key")),
            ("controllers", "*,bootstrapsigner,tokencleaner".into()),
            ("leader-elect", "false".into()),
            ("requestheader-client-ca-file", p("front-proxy-ca.crt")),
            ("root-ca-file", p("ca.crt")),
            ("service-account-private-key-file", p("sa.key")),
            ("use-service-account-credentials", "true".into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let c = self.command("kube-controller-manager", base, extra);
        let mut proc = Proc::spawn(name, c, self.path(&format!("{name}.log")));
        proc.wait_until(READY_LIMIT, || self.healthy(port, "/healthz", None))?;
        Ok(proc)
    }

    /// kube-scheduler for the API server on `api_port`, with kubeadm's flags
    /// and `extra`, waited for until its /healthz is ok.
    pub fn scheduler_proc(&self, name: &str, api_port: u16, extra: &[(String, String)]) -> Result<Proc, String> {
        let port = free_port();
        let kc = self.kubeconfig_for("scheduler.conf", api_port).display().to_string();
        let base = [
            ("authentication-kubeconfig", kc.clone()),
            ("authorization-kubeconfig", kc.clone()),
            ("kubeconfig", kc),
            ("bind-address", "127.0.0.1".into()),
            ("secure-port", port.to_string()),
            ("leader-elect", "false".into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let c = self.command("kube-scheduler", base, extra);
        let mut proc = Proc::spawn(name, c, self.path(&format!("{name}.log")));
        proc.wait_until(READY_LIMIT, || self.healthy(port, "/healthz", None))?;
        Ok(proc)
    }
}
