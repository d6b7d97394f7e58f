"""test_deploy.py: the Kubernetes manifests (deploy/kubernetes) and the image (deploy/Dockerfile).

- The three kustomizations (base, managed, managed-ha) render with `kubectl kustomize`, and every
  rendered object validates offline against the Kubernetes API schemas: tests/deploy/validate.js,
  with kubernetes-models and TypeScript pinned by tests/deploy/package-lock.json and installed here
  by `npm ci`. Broken objects (a misspelled or misplaced field, a bad enum value, a wrong type, a
  missing required field, an unknown kind) are rejected.
- The monitoring component added to each adds a PrometheusRule whose spec is
  deploy/monitoring/cdc-alerts.yml, valid against the Prometheus Operator's CRD (its
  kubernetes-models package), which rejects a broken rule.
- The pod specs meet the restricted Pod Security Standard, and what refers to what agrees: probe
  ports and status.listen, the sockets and the volume the application shares, the Secret keys of
  both containers, state_dir on a persistent volume, the image's uid. managed-ha: a StatefulSet of
  two replicas (Parallel), each with its own state_dir (volumeClaimTemplates), spread over nodes, a
  PodDisruptionBudget of one, readiness on /healthz, Kafka subscriptions only, exactly once.
- build/cdc needs no library outside deploy/deps.sh's runtime list (what the image installs).
- The cdc container and the example application run here exactly as rendered (command or the
  image's ENTRYPOINT, args, env with the Secrets' values, the ConfigMap's cdc.yaml), against a
  PostgreSQL configured with the rendered postgres arguments and set up by the rendered init
  script, and the probes answer as the kubelet sees them: /healthz and /readyz 200 while
  streaming, /readyz 503 (and /healthz still 200) once PostgreSQL stops; cdc stops with 0 on SIGTERM
  within the pod's grace period.
- managed-ha's two replicas run the same way, against that PostgreSQL and the mock Kafka cluster
  (tests/kafka_fixtures.py): one streams, the other is a standby (/readyz 503, Ready all the same),
  and it takes over within seconds when the active one's pod is deleted.

What running "exactly as rendered" cannot keep, and how it is remapped (nothing else is):
- each volume becomes a local directory: a ConfigMap's keys (a Secret's, with its items' paths and
  defaultMode) are written into one, an emptyDir or a PersistentVolumeClaim is an empty temporary
  directory; every path under a container's mountPath, in args and in cdc.yaml (the password's
  {file: PATH} included), is rewritten to the same place under that directory;
- the image's /usr/local/bin/cdc (its ENTRYPOINT, from deploy/Dockerfile) is $CDC_BIN;
- status.listen 0.0.0.0:PORT becomes 127.0.0.1:FREE_PORT (the kubelet connects to the pod's IP;
  here that is the loopback, and the port must not collide with other tests), and the probes and
  the Prometheus annotation, which name PORT, are sent to FREE_PORT;
- the base's dsn names the pod's loopback on port 5432; the test server has a free port of its own,
  so the dsn's port is rewritten (the managed overlay's dsn is empty: its PG* variables come
  from the Secret, whose values this test provides, as a user would);
- managed-ha's kafka.brokers, a placeholder, becomes the mock Kafka cluster's bootstrap servers;
- every container runs as the test's own uid, so an allow list's uids (the application's uid in the
  pod) become that uid.
"""

import http.client
import json
import os
import re
import secrets
import shutil
import subprocess
import tempfile
import time

import psycopg2
import pytest
import yaml

from conftest import CDC_BIN, ROOT, CdcProcess, drop_slot, wait_for
from kafka_fixtures import row_plain
from npm import npm_ci
from pg import TempPostgres, TempStandby, free_port

KUBECTL = "/usr/bin/kubectl"
DEPLOY = os.path.join(ROOT, "deploy")
VALIDATOR_DIR = os.path.join(ROOT, "tests", "deploy")
KUSTOMIZATIONS = {"base": "deploy/kubernetes/base", "managed": "deploy/kubernetes/overlays/managed",
                  "managed-ha": "deploy/kubernetes/overlays/managed-ha",
                  "failover": "deploy/kubernetes/overlays/failover"}
WORKLOADS = {"base": "StatefulSet", "managed": "Deployment", "managed-ha": "StatefulSet", "failover": "Deployment"}

# The Secrets a user creates (README, "Deploy on Kubernetes"); the cdc password has a quote and a
# space, so quoting in the init script and in libpq is exercised too.
CDC_PASSWORD = "cdc 'pw' " + secrets.token_hex(6)
SECRETS = {
    "db-passwords": {"postgres-password": "pg-" + secrets.token_hex(8), "cdc-password": CDC_PASSWORD,
                     "replicator-password": "repl-" + secrets.token_hex(8)},
    # cdc-source (managed): PGHOST and PGPORT are filled in with the test server's.
    "cdc-source": {"PGDATABASE": "app", "PGUSER": "cdc"},
    "cdc-password": {"password": CDC_PASSWORD},  # managed: mounted as a file
}


# --- rendering and validation ----------------------------------------------------------------------

def kustomize(directory):
    if not os.access(KUBECTL, os.X_OK):
        pytest.fail(f"{KUBECTL} not found: the deploy tests render the manifests with kubectl kustomize")
    p = subprocess.run([KUBECTL, "kustomize", directory], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, f"kubectl kustomize {directory} failed:\n{p.stderr}"
    return [d for d in yaml.safe_load_all(p.stdout) if d]


def render(which):
    return kustomize(os.path.join(ROOT, KUSTOMIZATIONS[which]))


@pytest.fixture(scope="module")
def rendered():
    return {which: render(which) for which in KUSTOMIZATIONS}


@pytest.fixture(scope="session")
def validate():
    npm_ci(VALIDATOR_DIR)

    def run(objs):
        p = subprocess.run(["node", os.path.join(VALIDATOR_DIR, "validate.js")], input=json.dumps(objs),
                           capture_output=True, text=True, timeout=120)
        assert p.returncode in (0, 1), f"validate.js failed (exit {p.returncode}):\n{p.stderr}"
        out = json.loads(p.stdout)
        assert len(out) == len(objs)
        return out
    return run


def test_kustomizations_render(rendered):
    kinds = {w: sorted((o["kind"], o["metadata"]["name"]) for o in objs) for w, objs in rendered.items()}
    assert kinds["base"] == [("ConfigMap", "cdc-config"), ("ConfigMap", "db-init"), ("Service", "db"),
                             ("StatefulSet", "db")]
    assert [k for k, _ in kinds["managed"]] == ["ConfigMap", "Deployment", "PersistentVolumeClaim"]
    assert [k for k, _ in kinds["managed-ha"]] == ["ConfigMap", "PodDisruptionBudget", "Service", "StatefulSet"]
    assert [k for k, _ in kinds["failover"]] == ["ConfigMap"] * 3 + ["Deployment", "PersistentVolumeClaim",
                                                                     "Service", "StatefulSet"]


def test_rendered_objects_validate(rendered, validate):
    for which, objs in rendered.items():
        results = validate(objs)
        bad = [r for r in results if r["errors"]]
        assert not bad, f"{which}: invalid objects:\n{json.dumps(bad, indent=1)}"


def _sidecar_of(workload):
    return next(c for c in workload["spec"]["template"]["spec"]["initContainers"] if c["name"] == "cdc")


def cdc_container(workload):
    """The cdc container: the native sidecar (base, managed) or managed-ha's only container."""
    pod = workload["spec"]["template"]["spec"]
    return next(c for c in pod.get("initContainers", []) + pod["containers"] if c["name"] == "cdc")


def test_validation_rejects_broken_objects(rendered, validate):
    sts = next(o for o in rendered["base"] if o["kind"] == "StatefulSet")

    def broken(change):
        o = json.loads(json.dumps(sts))
        change(o)
        return o

    def rename(d, old, new):
        d[new] = d.pop(old)

    cases = [
        ("the unchanged StatefulSet", sts, None),
        ("a misspelled field", broken(lambda o: rename(_sidecar_of(o), "readinessProbe", "readinesProbe")),
         "readinesProbe"),
        ("a container field in the pod spec",
         broken(lambda o: o["spec"]["template"]["spec"].update(readOnlyRootFilesystem=True)),
         "readOnlyRootFilesystem"),
        ("a misspelled field in a securityContext",
         broken(lambda o: rename(_sidecar_of(o)["securityContext"], "allowPrivilegeEscalation",
                                 "allowPrivilegeEscalaton")), "allowPrivilegeEscalaton"),
        ("a value outside an enum", broken(lambda o: _sidecar_of(o).update(imagePullPolicy="Sometimes")),
         "imagePullPolicy"),
        ("a string for an integer",
         broken(lambda o: _sidecar_of(o)["ports"][0].update(containerPort="9187")), "containerPort"),
        ("a bad quantity",
         broken(lambda o: _sidecar_of(o)["resources"]["limits"].update(memory="256 megs")), "memory"),
        ("a missing required field", broken(lambda o: _sidecar_of(o).pop("name")), "name"),
        ("a probe without a port", broken(lambda o: _sidecar_of(o)["livenessProbe"]["httpGet"].pop("port")),
         "port"),
        ("an unknown kind", broken(lambda o: o.update(kind="StatefulSets")), "no schema"),
    ]
    results = validate([c[1] for c in cases])
    for (what, _, culprit), r in zip(cases, results):
        if culprit is None:
            assert r["errors"] == [], f"{what}: {r['errors']}"
        else:
            assert r["errors"], f"{what}: accepted by the validator"
            assert any(culprit in e for e in r["errors"]), f"{what}: errors do not name {culprit}: {r['errors']}"
    # Not covered by the schema: a container's restartPolicy is a plain string in the API's OpenAPI
    # spec (the API server checks "Always" in code), so test_pod_specs checks the sidecar's itself.


# --- the alert rules as a PrometheusRule ------------------------------------------------------------

def test_monitoring_component_adds_the_alert_rules(rendered, validate, tmp_path):
    """deploy/kubernetes/components/monitoring, added to each kustomization as a user would (a
    kustomization that names it in components:), adds one object: a PrometheusRule whose spec is
    deploy/monitoring/cdc-alerts.yml, so the two cannot drift; it validates against the Prometheus
    Operator's CRD, which rejects a broken rule."""
    with open(os.path.join(DEPLOY, "monitoring", "cdc-alerts.yml")) as f:
        rules = yaml.safe_load(f)
    for which, path in KUSTOMIZATIONS.items():
        d = tmp_path / which
        os.makedirs(d)
        rel = os.path.relpath(os.path.join(ROOT, "deploy", "kubernetes"), d)
        (d / "kustomization.yaml").write_text(yaml.safe_dump({
            "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
            "resources": [os.path.relpath(os.path.join(ROOT, path), d)],
            "components": [f"{rel}/components/monitoring"]}))
        objs = kustomize(str(d))
        added = [o for o in objs if o not in rendered[which]]
        assert len(objs) == len(rendered[which]) + 1 and [(o["kind"], o["metadata"]["name"]) for o in added] == \
            [("PrometheusRule", "cdc-alerts")], which
        [rule] = added
        assert rule["apiVersion"] == "monitoring.coreos.com/v1"
        assert rule["spec"] == rules, "the PrometheusRule differs from cdc-alerts.yml: run make monitoring-rule"
        bad = [r for r in validate(objs) if r["errors"]]
        assert not bad, f"{which} with the monitoring component: invalid objects:\n{json.dumps(bad, indent=1)}"

    def broken(change):
        o = json.loads(json.dumps(rule))
        change(o["spec"]["groups"][0]["rules"][0])
        return o
    cases = [("a rule without expr", broken(lambda r: r.pop("expr")), "expr"),
             ("a misspelled field", broken(lambda r: r.update(fr=r.pop("for"))), "fr"),
             ("labels that are not strings", broken(lambda r: r.update(labels={"severity": 2})), "severity")]
    for (what, _, culprit), r in zip(cases, validate([c[1] for c in cases])):
        assert r["errors"], f"{what}: accepted by the validator"
        assert any(culprit in e for e in r["errors"]), f"{what}: errors do not name {culprit}: {r['errors']}"


# --- what the pod specs say --------------------------------------------------------------------------

def dockerfile():
    """ENTRYPOINT, CMD and USER of the final stage of deploy/Dockerfile."""
    with open(os.path.join(DEPLOY, "Dockerfile")) as f:
        final = re.split(r"^FROM\s", f.read(), flags=re.M)[-1]
    entrypoint = json.loads(re.search(r"^ENTRYPOINT\s+(\[.*\])\s*$", final, re.M).group(1))
    cmd = json.loads(re.search(r"^CMD\s+(\[.*\])\s*$", final, re.M).group(1))
    user = re.search(r"^USER\s+(\d+)(?::(\d+))?\s*$", final, re.M)
    assert re.search(r"^COPY\s+--from=build\s+\S+\s+" + re.escape(entrypoint[0]) + r"\s*$", final, re.M), \
        "the ENTRYPOINT is not the binary the build stage copies in"
    return entrypoint, cmd, int(user.group(1)), int(user.group(2) or user.group(1))


def workload(objs, which):
    return next(o for o in objs if o["kind"] == WORKLOADS[which])


def configmap(objs, name):
    return next(o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == name)


def container_port(c, port):
    """A probe's port (a number or a container port's name) as a number."""
    if isinstance(port, int):
        return port
    return next(p["containerPort"] for p in c.get("ports", []) if p.get("name") == port)


def volume_of(pod, claim_templates, c, mount_path):
    """(kind, volume) of the volume a container mounts at mount_path."""
    name = next(m["name"] for m in c["volumeMounts"] if m["mountPath"] == mount_path)
    for v in pod.get("volumes", []):
        if v["name"] == name:
            kind = next(k for k in v if k != "name")
            return kind, v
    if any(t["metadata"]["name"] == name for t in claim_templates):
        return "volumeClaimTemplate", name
    raise AssertionError(f"volume {name} of {c['name']} is not defined")


def password_secret(pod, c, cfg):
    """(Secret name, key) that cdc's source.password file comes from: a secret volume that only c
    mounts, whatever the other containers are."""
    path = cfg["source"]["password"]["file"]
    mount = next(m for m in c["volumeMounts"] if path.startswith(m["mountPath"] + "/"))
    assert mount.get("readOnly") is True, mount
    kind, v = volume_of(pod, [], c, mount["mountPath"])
    assert kind == "secret", f"{path} is not on a Secret volume"
    name = os.path.relpath(path, mount["mountPath"])
    items = v["secret"].get("items")
    key = next(i["key"] for i in items if i["path"] == name) if items else name
    assert v["secret"]["defaultMode"] & 0o007 == 0, "the password file is readable by others"
    others = [o for o in pod["containers"] + pod.get("initContainers", []) if o is not c]
    assert not any(m["name"] == mount["name"] for o in others for m in o.get("volumeMounts", [])), \
        "another container mounts cdc's password"
    return v["secret"]["secretName"], key


def check_config(cfg, tmp_path):
    """cdc check-config accepts cfg, its password file (a Secret's, in the pod) made here."""
    cfg = json.loads(json.dumps(cfg))
    pw = tmp_path / "password"
    pw.write_text(CDC_PASSWORD)
    cfg["source"]["password"]["file"] = str(pw)
    path = tmp_path / "cdc.yaml"
    path.write_text(yaml.safe_dump(cfg))
    p = subprocess.run([CDC_BIN, "check-config", "-c", str(path)], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    assert f"password: {{file: {pw}}}" in p.stdout and CDC_PASSWORD not in p.stdout


def config_of(objs, pod, c):
    """The cdc.yaml a cdc container reads (through its -c argument and the ConfigMap mounted there)."""
    path = c["args"][c["args"].index("-c") + 1]
    mount = os.path.dirname(path)
    kind, v = volume_of(pod, [], c, mount)
    assert kind == "configMap", f"{path} is not on a ConfigMap"
    return yaml.safe_load(configmap(objs, v["configMap"]["name"])["data"][os.path.basename(path)])


@pytest.mark.parametrize("which", list(KUSTOMIZATIONS))
def test_pod_specs(rendered, which):
    objs = rendered[which]
    w = workload(objs, which)
    pod = w["spec"]["template"]["spec"]
    claims = w["spec"].get("volumeClaimTemplates", [])
    _, _, image_uid, image_gid = dockerfile()

    # Pod Security Standards, restricted.
    sc = pod["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert sc["fsGroup"] == image_gid
    assert not any(pod.get(k) for k in ("hostNetwork", "hostPID", "hostIPC"))
    assert not any("hostPath" in v for v in pod.get("volumes", []))
    containers = pod["containers"] + pod.get("initContainers", [])
    for c in containers:
        csc = c["securityContext"]
        assert csc["allowPrivilegeEscalation"] is False, c["name"]
        assert csc["capabilities"] == {"drop": ["ALL"]}, c["name"]
        assert csc["readOnlyRootFilesystem"] is True, c["name"]
        assert not csc.get("privileged") and csc["runAsUser"] != 0, c["name"]
        for k in ("requests", "limits"):
            assert set(c["resources"][k]) >= {"cpu", "memory"}, f"{c['name']}: resources.{k}"

    # cdc is a native sidecar (managed-ha: the only container), running the image's uid; the pod
    # leaves it time to flush on SIGTERM.
    cdc = cdc_container(w)
    if which == "managed-ha":
        assert pod["containers"] == [cdc] and "initContainers" not in pod
    else:
        assert cdc in pod["initContainers"] and cdc["restartPolicy"] == "Always"
    assert cdc["securityContext"]["runAsUser"] == image_uid
    assert pod["terminationGracePeriodSeconds"] >= 40
    cfg = config_of(objs, pod, cdc)

    # Probes and Prometheus reach status.listen, on every interface (the kubelet uses the pod's IP).
    # managed-ha's readiness is /healthz: its standby's /readyz is 503 by design.
    host, port = cfg["status"]["listen"].rsplit(":", 1)
    assert host == "0.0.0.0" and not cfg["status"].get("tcp_control")
    ready_path = "/healthz" if which == "managed-ha" else "/readyz"
    for probe, path in (("startupProbe", "/healthz"), ("livenessProbe", "/healthz"), ("readinessProbe", ready_path)):
        get = cdc[probe]["httpGet"]
        assert get["path"] == path and container_port(cdc, get["port"]) == int(port), probe
    ann = w["spec"]["template"]["metadata"]["annotations"]
    assert ann["prometheus.io/scrape"] == "true" and ann["prometheus.io/port"] == port
    assert ann["prometheus.io/path"] == "/metrics"

    # state_dir on a persistent volume; the sockets on an emptyDir that the application mounts at
    # the same place and connects to (managed-ha: only the status socket, no application).
    state = volume_of(pod, claims, cdc, cfg["state_dir"])
    assert state[0] in ("volumeClaimTemplate", "persistentVolumeClaim"), state
    sockdir = os.path.dirname(cfg["status"]["socket"])
    assert volume_of(pod, claims, cdc, sockdir)[0] == "emptyDir"
    if which != "managed-ha":
        assert os.path.dirname(cfg["subscribers"]["socket"]) == sockdir
        app = next(c for c in pod["containers"] if c["name"] == "app")
        assert volume_of(pod, claims, app, sockdir) == volume_of(pod, claims, cdc, sockdir)
        assert app["args"][:3] == ["tail", "-s", cfg["subscribers"]["socket"]]
        assert app["args"][3] in [s["name"] for s in cfg["subscriptions"]]
        # The application runs as a uid of its own, the only one its subscription's allow list names.
        app_uid = app["securityContext"]["runAsUser"]
        assert app_uid != cdc["securityContext"]["runAsUser"]
        sub = next(s for s in cfg["subscriptions"] if s["name"] == app["args"][3])
        assert sub["allow"] == {"uids": [app_uid]}, sub

    # No password in a ConfigMap: the connection string has none, the SQL takes it from the environment,
    # cdc from a file of a Secret (source.password: {file: PATH}); no PASSWORD in cdc's environment.
    assert "password" not in re.sub(r"\s", "", cfg["source"]["dsn"]).lower()
    assert not any("PASSWORD" in e["name"] for e in cdc.get("env", [])), cdc.get("env")
    secret = password_secret(pod, cdc, cfg)
    assert secret == (("cdc-password", "password") if which in ("managed", "managed-ha")
                      else ("db-passwords", "cdc-password")), secret
    for cm in (o for o in objs if o["kind"] == "ConfigMap"):
        for text in cm["data"].values():
            assert not re.search(r"\bPASSWORD\s*'", text, re.I), cm["metadata"]["name"]
    for c in containers:
        for e in c.get("env", []):
            assert "PASSWORD" not in e["name"] or "secretKeyRef" in e.get("valueFrom", {}), (c["name"], e)

    if which == "base":
        pg = next(c for c in pod["containers"] if c["name"] == "postgres")
        assert pg["image"] == "postgres:15"
        assert "wal_level=logical" in pg["args"]
        assert "env" not in cdc and "envFrom" not in cdc
        # The init script's CDC_PASSWORD is the Secret key cdc logs in with.
        assert {"name": "CDC_PASSWORD", "valueFrom": {"secretKeyRef": {"name": secret[0], "key": secret[1]}}} \
            in pg["env"]
        kind, v = volume_of(pod, claims, pg, "/docker-entrypoint-initdb.d")
        assert kind == "configMap" and v["configMap"]["name"] == "db-init"
    elif which == "failover":
        assert "env" not in cdc and "envFrom" not in cdc
    else:
        assert cdc["envFrom"] == [{"secretRef": {"name": "cdc-source"}}]
    if which in ("managed", "failover"):
        assert w["spec"]["replicas"] == 1 and w["spec"]["strategy"] == {"type": "Recreate"}


def test_managed_ha_spec(rendered, tmp_path):
    """managed-ha: two replicas on one slot, each with its own state_dir, spread over nodes, evicted
    one at a time, Kafka subscriptions only, exactly once (so that a takeover fences the former
    active one). What applies to every kustomization is in test_pod_specs."""
    objs = rendered["managed-ha"]
    sts = workload(objs, "managed-ha")
    spec = sts["spec"]
    pod = spec["template"]["spec"]
    labels = spec["template"]["metadata"]["labels"]
    assert spec["selector"] == {"matchLabels": labels}
    assert spec["replicas"] == 2 and spec["podManagementPolicy"] == "Parallel"

    # The headless Service the StatefulSet names selects its pods.
    svc = next(o for o in objs if o["kind"] == "Service")
    assert svc["metadata"]["name"] == spec["serviceName"] and svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["selector"] == labels

    assert pod["affinity"] == {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
        "weight": 100, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                                           "labelSelector": {"matchLabels": labels}}}]}}

    pdb = next(o for o in objs if o["kind"] == "PodDisruptionBudget")
    assert pdb["spec"] == {"maxUnavailable": 1, "selector": {"matchLabels": labels}}

    # state_dir on a volumeClaimTemplate (one claim per replica), not on a shared claim.
    cdc = cdc_container(sts)
    cfg = config_of(objs, pod, cdc)
    kind, name = volume_of(pod, spec["volumeClaimTemplates"], cdc, cfg["state_dir"])
    assert kind == "volumeClaimTemplate"
    [claim] = [t for t in spec["volumeClaimTemplates"] if t["metadata"]["name"] == name]
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert not any("persistentVolumeClaim" in v for v in pod["volumes"])
    assert cdc["readinessProbe"]["httpGet"]["path"] == "/healthz"

    # Kafka subscriptions only, exactly once; the same source as the managed overlay.
    assert cfg["subscriptions"] and {s["sink"] for s in cfg["subscriptions"]} == {"kafka"}
    assert cfg["kafka"]["exactly_once"] is True and cfg["kafka"]["brokers"]
    assert "subscribers" not in cfg
    managed = rendered["managed"]
    managed_cfg = config_of(managed, workload(managed, "managed")["spec"]["template"]["spec"],
                            cdc_container(workload(managed, "managed")))
    assert cfg["source"] == managed_cfg["source"]
    check_config(cfg, tmp_path)


# --- the image's libraries ----------------------------------------------------------------------------

def test_runtime_packages_cover_the_binary():
    """Every library build/cdc links against comes from a package of `deploy/deps.sh runtime` (the
    final image installs just those, with their dependencies) or from libc6."""
    with open(os.path.join(DEPLOY, "deps.sh")) as f:
        runtime = set(re.search(r"^runtime_pkgs=\(([^)]*)\)", f.read(), re.M).group(1).split())
    out = subprocess.run(["readelf", "-d", CDC_BIN], capture_output=True, text=True, check=True).stdout
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)
    assert needed
    ldd = subprocess.run(["ldd", CDC_BIN], capture_output=True, text=True, check=True).stdout
    paths = dict(re.findall(r"^\s*(\S+) => (\S+)", ldd, re.M))
    for lib in needed:
        owner = subprocess.run(["dpkg-query", "-S", os.path.realpath(paths[lib])], capture_output=True,
                               text=True)
        if owner.returncode != 0:  # /lib is a symlink to /usr/lib on Debian 12; dpkg knows one name
            owner = subprocess.run(["dpkg-query", "-S", paths[lib]], capture_output=True, text=True)
        assert owner.returncode == 0, f"{lib} ({paths[lib]}) belongs to no package"
        pkg = owner.stdout.split(":")[0]
        if re.match(r"^lib(a|ub|l|t)san\d*$", pkg):
            continue  # a sanitizer's runtime (make check SANITIZE=...): never in the image
        assert pkg in runtime | {"libc6"}, f"{lib} comes from {pkg}, not in deploy/deps.sh runtime"


# --- running the pod's containers here, as rendered ----------------------------------------------------

def postgres_settings(objs):
    """The -c settings of the rendered postgres container."""
    args = next(c for c in workload(objs, "base")["spec"]["template"]["spec"]["containers"]
                if c["name"] == "postgres")["args"]
    return dict(args[i + 1].split("=", 1) for i, a in enumerate(args) if a == "-c")


@pytest.fixture(scope="module")
def db(rendered):
    """A PostgreSQL started with the rendered postgres settings, its database created and the
    rendered init script run as the image's entrypoint runs it (psql as the superuser, in
    POSTGRES_DB, CDC_PASSWORD from the Secret); role cdc must give its password (scram)."""
    objs = rendered["base"]
    pod = workload(objs, "base")["spec"]["template"]["spec"]
    pgc = next(c for c in pod["containers"] if c["name"] == "postgres")
    env = {e["name"]: e for e in pgc["env"]}
    dbname = env["POSTGRES_DB"]["value"]
    with TempPostgres(**postgres_settings(objs)) as server:
        if server.version < 15:
            pytest.skip("the base's init script publishes FOR TABLES IN SCHEMA, which PostgreSQL 15 "
                        "introduced (its image is postgres:15)")
        server.sql(f'create database "{dbname}"')
        hba = os.path.join(server.datadir, "pg_hba.conf")
        with open(hba) as f:
            rest = f.read()
        with open(hba, "w") as f:
            f.write("host all cdc 127.0.0.1/32 scram-sha-256\nhost replication cdc 127.0.0.1/32 scram-sha-256\n"
                    + rest)
        server.sql("select pg_reload_conf()")
        ref = env["CDC_PASSWORD"]["valueFrom"]["secretKeyRef"]
        init = configmap(objs, next(v["configMap"]["name"] for v in pod["volumes"] if v["name"] == next(
            m["name"] for m in pgc["volumeMounts"] if m["mountPath"] == "/docker-entrypoint-initdb.d")))
        for name, sql in sorted(init["data"].items()):
            assert name.endswith(".sql")
            p = subprocess.run([os.path.join(server.client_bindir, "psql"), "-v", "ON_ERROR_STOP=1", "--no-psqlrc",
                                "-h", server.host, "-p", str(server.port), "-U", "postgres", "-d", dbname],
                               input=sql, capture_output=True, text=True, timeout=60,
                               env={"PATH": os.environ["PATH"],
                                    "CDC_PASSWORD": SECRETS[ref["name"]][ref["key"]]})
            assert p.returncode == 0, f"{name} failed:\n{p.stdout}\n{p.stderr}"
        server.dbname = dbname
        yield server


class Pod:
    """The volumes of one pod as local directories, and its containers as local processes."""

    def __init__(self, objs, which, tmp_path, pg):
        self.objs = objs
        self.w = workload(objs, which)
        self.spec = self.w["spec"]["template"]["spec"]
        self.claims = {t["metadata"]["name"] for t in self.w["spec"].get("volumeClaimTemplates", [])}
        self.tmp = str(tmp_path)
        self.pg = pg
        self.dirs = {}
        # Unix socket paths are limited to 107 bytes: emptyDirs live under a short /tmp name.
        self.short = tempfile.mkdtemp(prefix="cdc-k8s-")
        self.ports = {}  # container port -> local port
        self.processes = []

    def volume_dir(self, name):
        if name in self.dirs:
            return self.dirs[name]
        v = next((v for v in self.spec.get("volumes", []) if v["name"] == name), None)
        assert v is not None or name in self.claims, f"volume {name} is not defined"
        d = os.path.join(self.short if v and "emptyDir" in v else self.tmp, "vol-" + name)
        os.makedirs(d)
        if v and "configMap" in v:
            for key, text in configmap(self.objs, v["configMap"]["name"])["data"].items():
                with open(os.path.join(d, key), "w") as f:
                    f.write(text)
        elif v and "secret" in v:
            data = SECRETS[v["secret"]["secretName"]]
            for item in v["secret"].get("items") or [{"key": k, "path": k} for k in data]:
                path = os.path.join(d, item["path"])
                with open(path, "w") as f:
                    f.write(data[item["key"]])
                os.chmod(path, v["secret"].get("defaultMode", 0o644))
        elif v:
            assert "emptyDir" in v or "persistentVolumeClaim" in v, f"volume {name}: unexpected kind"
        self.dirs[name] = d
        return d

    def mounts(self, c):
        """(mountPath, local dir) of a container's volumes, longest path first."""
        m = [(vm["mountPath"], self.volume_dir(vm["name"])) for vm in c.get("volumeMounts", [])]
        return sorted(m, key=lambda x: -len(x[0]))

    @staticmethod
    def remap(s, mounts):
        for mp, d in mounts:
            if s == mp or s.startswith(mp + "/"):
                return d + s[len(mp):]
        return s

    def env(self, c):
        env = {"PATH": "/usr/bin:/bin", "HOME": self.tmp}
        for ef in c.get("envFrom", []):
            env.update(SECRETS[ef["secretRef"]["name"]])
        for e in c.get("env", []):
            if "value" in e:
                env[e["name"]] = e["value"]
            else:
                ref = e["valueFrom"]["secretKeyRef"]
                env[e["name"]] = SECRETS[ref["name"]][ref["key"]]
        return env

    def argv(self, c):
        """What the container runs: command, else the image's ENTRYPOINT; args, else its CMD (only
        without a command), as the kubelet combines them."""
        entrypoint, cmd, _, _ = dockerfile()
        argv = c["command"] + c.get("args", []) if "command" in c else entrypoint + c.get("args", cmd)
        assert argv[0] in ("/usr/local/bin/cdc", "cdc"), argv
        return [CDC_BIN] + [self.remap(a, self.mounts(c)) for a in argv[1:]]

    def prepare_config(self, c, kafka_bootstrap=None):
        """Rewrites the cdc.yaml that c reads (in its local ConfigMap directory): paths under c's
        mounts, status.listen's address, the dsn's port and kafka.brokers (to kafka_bootstrap);
        returns the rewritten config."""
        mounts = self.mounts(c)
        path = self.remap(c["args"][c["args"].index("-c") + 1], mounts)
        with open(path) as f:
            cfg = yaml.safe_load(f)
        for key in ("state_dir",):
            cfg[key] = self.remap(cfg[key], mounts)
            assert cfg[key].startswith(self.tmp), f"{key} {cfg[key]} is not on a volume"
        for sub in cfg.get("subscriptions", []):
            if "allow" in sub:
                sub["allow"] = {"uids": [os.geteuid()]}
        password = cfg["source"]["password"]
        password["file"] = self.remap(password["file"], mounts)
        assert password["file"].startswith(self.tmp), f"the password {password['file']} is not on a volume"
        for section in ("status", "subscribers") if "subscribers" in cfg else ("status",):
            cfg[section]["socket"] = self.remap(cfg[section]["socket"], mounts)
            assert cfg[section]["socket"].startswith(self.short), f"{section}.socket is not on an emptyDir"
        host, port = cfg["status"]["listen"].rsplit(":", 1)
        self.ports[int(port)] = free_port()
        cfg["status"]["listen"] = f"127.0.0.1:{self.ports[int(port)]}"
        if re.search(r"\bport=5432\b", cfg["source"]["dsn"]):
            cfg["source"]["dsn"] = re.sub(r"\bport=5432\b", f"port={self.pg.port}", cfg["source"]["dsn"])
        if "kafka" in cfg:
            assert kafka_bootstrap, "a kafka section needs brokers to run against"
            cfg["kafka"]["brokers"] = kafka_bootstrap
        with open(path, "w") as f:
            yaml.safe_dump(cfg, f)
        return cfg

    def start(self, c):
        n = len(self.processes)
        env = self.env(c)
        p = CdcProcess(self.argv(c), os.path.join(self.tmp, f"{c['name']}{n}.stdout"),
                       os.path.join(self.tmp, f"{c['name']}{n}.stderr"), env=env)
        self.processes.append(p)
        return p

    def http_get(self, c, probe):
        """(ok, status, body) of one httpGet probe, as the kubelet runs it: to the pod's address
        (here the loopback) on the probe's port, within timeoutSeconds; ok is 200 <= status < 400."""
        spec = c[probe]
        get = spec["httpGet"]
        assert get.get("scheme", "HTTP") == "HTTP" and "host" not in get
        return self.get(container_port(c, get["port"]), get["path"], spec.get("timeoutSeconds", 1),
                        {h["name"]: h["value"] for h in get.get("httpHeaders", [])})

    def get(self, port, path, timeout=5, headers=None):
        """(ok, status, body) of GET path on the pod's container port."""
        conn = http.client.HTTPConnection("127.0.0.1", self.ports[port], timeout=timeout)
        try:
            conn.request("GET", path, headers=headers or {})
            r = conn.getresponse()
            body = r.read().decode()
            return 200 <= r.status < 400, r.status, body
        except OSError as e:
            return False, None, str(e)
        finally:
            conn.close()

    def scrape(self):
        """What Prometheus scrapes from the port and path of the pod template's annotations."""
        ann = self.w["spec"]["template"]["metadata"]["annotations"]
        assert ann["prometheus.io/scrape"] == "true"
        ok, code, body = self.get(int(ann["prometheus.io/port"]), ann["prometheus.io/path"])
        assert code == 200, (code, body)
        return body

    def wait_probe(self, proc, c, probe, want=True, timeout=None):
        """Waits until the probe passes (want=True) or fails; by default no longer than the kubelet
        would wait (periodSeconds * failureThreshold)."""
        spec = c[probe]
        if timeout is None:
            timeout = spec.get("periodSeconds", 10) * spec.get("failureThreshold", 3)

        def check():
            if not proc.running():
                raise AssertionError(f"{c['name']} exited\n{proc.describe()}")
            r = self.http_get(c, probe)
            return r if r[0] == want else None
        return wait_for(check, timeout, 0.1, f"{probe} of {c['name']} to {'pass' if want else 'fail'}\n"
                        f"{proc.describe()}")

    def close(self):
        for p in self.processes:
            p.close()
        shutil.rmtree(self.short, ignore_errors=True)


@pytest.fixture
def pod_factory(tmp_path):
    pods = []

    def make(objs, which, pg, name=None):
        p = Pod(objs, which, tmp_path / (name or which), pg)
        os.makedirs(p.tmp)
        pods.append(p)
        return p
    yield make
    for p in pods:
        p.close()


def check_role(pg):
    """cdc's role, logged in with the Secret's password: replication, nothing more, and the
    heartbeat's function granted."""
    conn = psycopg2.connect(host=pg.host, port=pg.port, dbname=pg.dbname, user="cdc", password=CDC_PASSWORD,
                            connect_timeout=10)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute("select rolsuper, rolcreatedb, rolcreaterole, rolreplication, "
                        "has_database_privilege(current_user, current_database(), 'CREATE') "
                        "from pg_roles where rolname = current_user")
            assert cur.fetchone() == (False, False, False, True, False)
            cur.execute("select pg_logical_emit_message(true, 'cdc.test', '')")
            cur.execute("select count(*) from public.orders")
    finally:
        conn.close()
    with pytest.raises(psycopg2.OperationalError, match="password authentication failed"):
        psycopg2.connect(host=pg.host, port=pg.port, dbname=pg.dbname, user="cdc", password="wrong",
                         connect_timeout=10).close()


# managed-ha needs Kafka and runs two pods: test_two_replicas_run_as_rendered.
@pytest.mark.parametrize("which", ["base", "managed"])
def test_pod_runs_as_rendered(rendered, db, pod_factory, which):
    if not (os.path.isfile(CDC_BIN) and os.access(CDC_BIN, os.X_OK)):
        pytest.fail(f"{CDC_BIN} not built (run make)")
    if not db.running:
        db.start()
    SECRETS["cdc-source"].update(PGHOST=db.host, PGPORT=str(db.port))
    objs = rendered[which]
    pod = pod_factory(objs, which, db)
    cdc = _sidecar_of(pod.w)
    app = next(c for c in pod.spec["containers"] if c["name"] == "app")
    cfg = pod.prepare_config(cdc)
    if which == "base":
        check_role(db)

    # The sidecar starts first; the kubelet starts the other containers once its startupProbe passes.
    sidecar = pod.start(cdc)
    pod.wait_probe(sidecar, cdc, "startupProbe")
    assert pod.http_get(cdc, "livenessProbe")[:2] == (True, 200)
    assert pod.wait_probe(sidecar, cdc, "readinessProbe")[1:] == (200, "ready\n")
    consumer = pod.start(app)

    conn = psycopg2.connect(host=db.host, port=db.port, dbname=db.dbname, user="postgres")
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute("insert into public.orders (amount) values (10), (20) returning id")
        ids = [r[0] for r in cur.fetchall()]
        cur.execute("update public.orders set status = 'paid' where id = %s", (ids[0],))
        cur.execute("delete from public.orders where id = %s", (ids[1],))
    conn.close()
    evs = consumer.wait_events(4, timeout=30)
    assert [(e["subscription"], e["op"], e["table"], e["key"]["id"]) for e in evs[:4]] == [
        ("orders", "insert", "orders", ids[0]), ("orders", "insert", "orders", ids[1]),
        ("orders", "update", "orders", ids[0]), ("orders", "delete", "orders", ids[1])]
    assert evs[2]["new"]["status"] == "paid"

    # What the README has users run: kubectl exec POD -c cdc -- cdc status (default socket path,
    # here remapped), and Prometheus' scrape of the annotated port and path.
    status_sock = cfg["status"]["socket"]
    out = subprocess.run([CDC_BIN, "status", "-s", status_sock, "--json"], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 0, out.stderr
    st = json.loads(out.stdout)
    assert st["source"]["slot"] == cfg["source"]["slot"] and st["source"]["connected"] is True
    assert "orders" in [s["name"] for s in st["subscriptions"]]
    metrics = pod.scrape()
    assert re.search(r"^cdc_ready 1$", metrics, re.M), metrics[:500]

    # The database goes away (in the base pod, it is stopped first on deletion): not ready, still alive.
    db.stop("fast")
    ok, code, body = pod.wait_probe(sidecar, cdc, "readinessProbe", want=False)
    assert code == 503 and "not streaming" in body
    assert pod.http_get(cdc, "livenessProbe")[:2] == (True, 200)

    # Pod deletion: the application containers get SIGTERM first, then the sidecar, which must
    # exit 0 within the grace period.
    consumer.signal(15)
    consumer.wait_exit(10)
    t0 = time.monotonic()
    assert sidecar.terminate(timeout=pod.spec["terminationGracePeriodSeconds"]) == 0, sidecar.describe()
    assert time.monotonic() - t0 < pod.spec["terminationGracePeriodSeconds"]
    logs = sidecar.stderr() + consumer.stderr() + json.dumps(st)
    assert CDC_PASSWORD not in logs and SECRETS["db-passwords"]["postgres-password"] not in logs

    db.start()
    drop_slot(db, cfg["source"]["slot"])


def test_two_replicas_run_as_rendered(rendered, db, pod_factory, kafka, kafka_reader, proto):
    """managed-ha's replicas run as rendered, each with its own volumes (so its own state_dir), one
    config, one slot, against the mock Kafka: started at once (podManagementPolicy Parallel), both
    pass their probes; one streams (/readyz 200) while the other is a standby (/readyz 503, still
    Ready: the readinessProbe is /healthz). Deleting the active pod (SIGTERM, as in a rolling update)
    hands the slot to the standby within seconds, and a read-committed consumer sees each change
    once across the takeover."""
    if not db.running:
        db.start()
    SECRETS["cdc-source"].update(PGHOST=db.host, PGPORT=str(db.port))
    objs = rendered["managed-ha"]
    sts = workload(objs, "managed-ha")
    pods = [pod_factory(objs, "managed-ha", db, name=f"cdc-{i}") for i in range(sts["spec"]["replicas"])]
    cdc = cdc_container(sts)
    cfgs = [p.prepare_config(cdc, kafka.bootstrap) for p in pods]
    assert len({c["state_dir"] for c in cfgs}) == 2
    port = container_port(cdc, cdc["readinessProbe"]["httpGet"]["port"])
    slot = cfgs[0]["source"]["slot"]
    [sub] = cfgs[0]["subscriptions"]
    assert sub["tables"] == ["public.orders"] and "topic" not in sub
    reader = kafka_reader(["cdc.public.orders"], group=False)  # the default topic, cdc.{schema}.{table}

    procs = [p.start(cdc) for p in pods]
    for p, proc in zip(pods, procs):
        p.wait_probe(proc, cdc, "startupProbe")
    for p, proc in zip(pods, procs):
        assert p.wait_probe(proc, cdc, "readinessProbe")[1:] == (200, "ok\n")
        assert p.http_get(cdc, "livenessProbe")[:2] == (True, 200)

    def roles():
        r = [p.get(port, "/readyz")[1:] for p in pods]
        return r if sorted((code, body[:9]) for code, body in r) == [(200, "ready\n"), (503, "standby: ")] else None
    r = wait_for(roles, 30, 0.1, "one replica to stream and the other to wait\n" +
                 "\n".join(proc.describe() for proc in procs))
    active = [code for code, _ in r].index(200)
    standby = 1 - active
    assert r[active][1] == "ready\n"
    assert r[standby][1].startswith(f"standby: replication slot {slot} is streamed by another process"), r
    assert pods[standby].http_get(cdc, "readinessProbe")[:2] == (True, 200)
    wait_for(lambda: re.search(r"^cdc_standby 1$", pods[standby].scrape(), re.M), 10, 0.2,
             "cdc_standby 1 (published every second)")
    assert re.search(r"^cdc_standby 0$", pods[active].scrape(), re.M)
    st = json.loads(pods[standby].get(port, "/status")[2])
    assert st["source"]["standby"] is True and st["kafka"]["exactly_once"] is True

    conn = psycopg2.connect(host=db.host, port=db.port, dbname=db.dbname, user="postgres")
    conn.autocommit = True
    cur = conn.cursor()
    cur.execute("insert into public.orders (amount) values (10), (20) returning id")
    ids = [row[0] for row in cur.fetchall()]
    cur.execute("update public.orders set status = 'paid' where id = %s", (ids[0],))
    cur.execute("delete from public.orders where id = %s", (ids[1],))

    def changes(n):
        msgs = sorted(reader.wait(n, describe=lambda: procs[active].describe() + "\n" + procs[standby].describe()),
                      key=lambda m: (m.event.commit_lsn, m.event.tx_index))
        return [(m.event.op, row_plain(m.event.key)["id"]) for m in msgs]
    assert changes(4) == [(proto.OP_INSERT, ids[0]), (proto.OP_INSERT, ids[1]), (proto.OP_UPDATE, ids[0]),
                          (proto.OP_DELETE, ids[1])]

    # The active pod is deleted: it stops within the grace period, and the standby takes over.
    assert procs[active].terminate(timeout=pods[active].spec["terminationGracePeriodSeconds"]) == 0, \
        procs[active].describe()
    wait_for(lambda: pods[standby].get(port, "/readyz")[1] == 200, 10, 0.1,
             f"the standby to take over\n{procs[standby].describe()}")
    assert "taking over" in procs[standby].stderr()
    assert pods[standby].http_get(cdc, "readinessProbe")[:2] == (True, 200)
    cur.execute("insert into public.orders (amount) values (30) returning id")
    ids.append(cur.fetchone()[0])
    conn.close()
    assert changes(5)[4:] == [(proto.OP_INSERT, ids[2])]
    assert procs[standby].terminate(timeout=pods[standby].spec["terminationGracePeriodSeconds"]) == 0, \
        procs[standby].describe()
    assert len(reader.snapshot()) == 5, f"a change sent twice: {reader.snapshot()}"
    drop_slot(db, slot)


# --- failover: two PostgreSQL 17 instances and cdc following the primary -------------------------------

def pg_statefulset(objs):
    return next(o for o in objs if o["kind"] == "StatefulSet" and o["metadata"]["name"] == "pg")


def start_settings(objs, ordinal):
    """The -c settings start.sh gives pod pg-ORDINAL's PostgreSQL (its shell variables resolved)."""
    sts = pg_statefulset(objs)
    pod = sts["spec"]["template"]["spec"]
    pgc = next(c for c in pod["containers"] if c["name"] == "postgres")
    assert pgc["command"] == ["sh", "/scripts/start.sh"]
    scripts = configmap(objs, next(v["configMap"]["name"] for v in pod["volumes"] if v["name"] == "pg-scripts"))
    text = scripts["data"]["start.sh"].replace("$ord", str(ordinal)).replace("$other", str(1 - ordinal))
    assert "exec docker-entrypoint.sh postgres" in text
    return dict(m.split("=", 1) for m in re.findall(r'-c "?([a-z_]+=[^"\\\n]*?)"?\s*(?:\\\n|$)', text, re.M))


def test_failover_spec(rendered, tmp_path):
    """The failover overlay: pg-0 and pg-1 (postgres:17) in a StatefulSet whose headless Service
    names them, each set up for both roles (what the README lists for the primary and the
    standby), cdc as the managed overlay's Deployment with a failover slot and a connection string
    that names both and wants the one that accepts writes."""
    objs = rendered["failover"]
    sts = pg_statefulset(objs)
    spec = sts["spec"]
    pod = spec["template"]["spec"]
    assert spec["replicas"] == 2 and spec["podManagementPolicy"] == "OrderedReady"
    svc = next(o for o in objs if o["kind"] == "Service" and o["metadata"]["name"] == spec["serviceName"])
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["selector"] == spec["selector"]["matchLabels"]
    assert svc["spec"]["publishNotReadyAddresses"] is True
    assert pod["securityContext"]["runAsNonRoot"] is True
    for c in pod["containers"] + pod["initContainers"]:
        assert c["image"] == "postgres:17", c["name"]
        csc = c["securityContext"]
        assert csc["allowPrivilegeEscalation"] is False and csc["capabilities"] == {"drop": ["ALL"]}
        assert csc["readOnlyRootFilesystem"] is True and csc["runAsUser"] == 999
        for e in c.get("env", []):
            assert "PASSWORD" not in e["name"] or e["valueFrom"]["secretKeyRef"]["name"] == "db-passwords"
            if "valueFrom" in e:
                assert e["valueFrom"]["secretKeyRef"]["key"] in SECRETS["db-passwords"], e
    for ordinal in (0, 1):
        other = 1 - ordinal
        st = start_settings(objs, ordinal)
        assert st["wal_level"] == "logical" and st["hot_standby"] == "on" and st["hot_standby_feedback"] == "on"
        assert st["sync_replication_slots"] == "on"
        assert st["primary_slot_name"] == f"standby_pg_{ordinal}"
        assert st["synchronized_standby_slots"] == f"standby_pg_{other}"
        conninfo = dict(kv.split("=", 1) for kv in st["primary_conninfo"].split())
        assert conninfo["host"] == f"pg-{other}.{svc['metadata']['name']}" and conninfo["dbname"] == "app"
        assert conninfo["user"] == "replicator" and "password" not in conninfo
    clone = configmap(objs, next(v["configMap"]["name"] for v in pod["volumes"] if v["name"] == "pg-scripts"))
    assert '-C -S "standby_pg_$ord"' in clone["data"]["clone.sh"]  # the slot start.sh streams through

    cdc = cdc_container(workload(objs, "failover"))
    cfg = config_of(objs, workload(objs, "failover")["spec"]["template"]["spec"], cdc)
    assert cfg["source"]["failover"] is True
    dsn = dict(kv.split("=", 1) for kv in cfg["source"]["dsn"].split())
    assert dsn["host"] == "pg-0.pg,pg-1.pg" and dsn["port"] == "5432,5432"
    assert dsn["target_session_attrs"] == "read-write"
    check_config(cfg, tmp_path)


def test_failover_runs_as_rendered(rendered, pod_factory):
    """The failover overlay's pieces run here: a PostgreSQL 17 primary with pg-0's rendered settings,
    set up by the rendered init-cdc.sh; a standby copied from it (tests/pg.py, as clone.sh's
    pg_basebackup would) that then runs with pg-1's rendered settings (so slot synchronization works
    with the replicator role and the connection string start.sh writes); cdc and the example
    consumer as rendered. cdc says a promotion is safe, the primary dies, the standby is promoted,
    and the consumer sees changes from both sides of it. Host names pg-N.pg become 127.0.0.1 and
    port 5432 each server's own."""
    objs = rendered["failover"]
    secret = SECRETS["db-passwords"]
    primary = TempPostgres(version=17, **{k: v for k, v in start_settings(objs, 0).items()
                                          if k not in ("primary_conninfo", "primary_slot_name")})
    standby = None
    try:
        primary.start()
        primary.sql("create database app")
        pod = pg_statefulset(objs)["spec"]["template"]["spec"]
        init = configmap(objs, next(v["configMap"]["name"] for v in pod["volumes"] if v["name"] == "pg-init"))
        p = subprocess.run(["sh", "-c", init["data"]["init-cdc.sh"]], capture_output=True, text=True, timeout=60,
                           env={"PATH": f"{primary.client_bindir}:/usr/bin:/bin", "PGDATA": primary.datadir,
                                "PGHOST": primary.host, "PGPORT": str(primary.port), "POSTGRES_USER": "postgres",
                                "POSTGRES_DB": "app", "CDC_PASSWORD": secret["cdc-password"],
                                "REPLICATOR_PASSWORD": secret["replicator-password"]})
        assert p.returncode == 0, p.stdout + p.stderr
        primary.sql("select pg_reload_conf()")
        standby = TempStandby(primary, slot="standby_pg_1")
        standby.start()

        def local(settings, ordinal):
            out = dict(settings)
            peer = primary if ordinal == 1 else standby
            out["primary_conninfo"] = (out["primary_conninfo"].replace(f"host=pg-{1 - ordinal}.pg", f"host={peer.host}")
                                       .replace("port=5432", f"port={peer.port}"))
            out["primary_conninfo"] = re.sub(r" passfile=\S+", "", out["primary_conninfo"])
            return out
        standby.settings.update(local(start_settings(objs, 1), 1))
        standby.restart()
        cpod = pod_factory(objs, "failover", primary)
        cdc = _sidecar_of(cpod.w)
        app = next(c for c in cpod.spec["containers"] if c["name"] == "app")
        cfg = cpod.prepare_config(cdc)
        cfg["source"]["dsn"] = re.sub(r"host=\S+ port=\S+", f"host={primary.host},{standby.host} "
                                      f"port={primary.port},{standby.port}", cfg["source"]["dsn"])
        config_path = cpod.remap(cdc["args"][cdc["args"].index("-c") + 1], cpod.mounts(cdc))
        with open(config_path, "w") as f:
            yaml.safe_dump(cfg, f)
        sidecar = cpod.start(cdc)
        cpod.wait_probe(sidecar, cdc, "startupProbe")
        assert cpod.wait_probe(sidecar, cdc, "readinessProbe")[1:] == (200, "ready\n")
        consumer = cpod.start(app)
        port = container_port(cdc, cdc["readinessProbe"]["httpGet"]["port"])

        def failover():
            st = json.loads(cpod.get(port, "/status")[2])["source"]["failover"] or {}
            return st if st.get("ready") is not None else None
        st = wait_for(failover, 30, 0.2, "the failover check\n" + sidecar.describe())
        assert st["ready"] is True and st["synchronized_standby_slots"] == "standby_pg_1", st
        assert re.search(r'^cdc_source_failover_ready\{reason="ready"\} 1$', cpod.scrape(), re.M)
        conn = psycopg2.connect(host=primary.host, port=primary.port, dbname="app", user="postgres")
        conn.autocommit = True
        conn.cursor().execute("insert into public.orders (amount) values (10)")
        conn.close()
        consumer.wait_events(1, timeout=30)

        def synced():
            primary.sql("select pg_log_standby_snapshot()")
            r = standby.sql("select synced and not temporary from pg_replication_slots where slot_name = %s",
                            (cfg["source"]["slot"],))
            return r and r[0][0]
        wait_for(synced, 60, 0.5, "the standby's copy of the failover slot (synchronized as the replicator role)")
        primary.stop("immediate")
        standby.promote()
        conn = psycopg2.connect(host=standby.host, port=standby.port, dbname="app", user="postgres")
        conn.autocommit = True
        conn.cursor().execute("insert into public.orders (amount) values (20)")
        conn.close()
        # The promoted pg-1 names pg-0's slot in synchronized_standby_slots: cdc's stream waits,
        # and says why, until pg-0 is rebuilt as its standby (the README's steps: its volume
        # deleted, clone.sh copies pg-1 through a new slot standby_pg_0).
        wait_for(lambda: (json.loads(cpod.get(port, "/status")[2])["source"]["failover"] or {}).get("reason")
                 == "standby_slot_missing", 30, 0.2, "the failover check on the promoted server")
        assert "the server says severity=WARNING" in sidecar.stderr()
        assert len(consumer.events()) == 1
        primary.make_standby_of(standby, slot="standby_pg_0")
        evs = consumer.wait_events(2, timeout=60)
        assert [e["new"]["amount"] for e in evs[:2]] == ["10.00", "20.00"], evs
        wait_for(lambda: json.loads(cpod.get(port, "/status")[2])["source"]["promotions"] == 1, 30, 0.2,
                 "promotions 1 in /status")
        assert "following a promotion" in sidecar.stderr()
        assert sidecar.terminate(timeout=cpod.spec["terminationGracePeriodSeconds"]) == 0, sidecar.describe()
    finally:
        if standby is not None:
            standby.cleanup()
        primary.cleanup()
