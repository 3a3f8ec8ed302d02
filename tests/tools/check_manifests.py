#!/usr/bin/env python3
"""Checks of kiln's deployment files that need no cluster, no container engine and no GPU.

Run by tests/unit/test_deploy.c (`make test`), one check per Criterion test:

    python3 tests/tools/check_manifests.py [--root DIR] [--kiln BIN] CHECK...

CHECK is one of: yaml, kustomize, workloads, secrets, prometheus, docker, commands, slurm,
systemd, docs (or all). Each prints what it found wrong, one "FAIL:" line per problem, and
exits 1 when anything failed.

The Kubernetes overlays are rendered by a small Kustomize subset written here (resources,
namespace, images, replicas, patches as strategic merges, secret/configMap generators), so
the checks run where no kubectl exists (CI); where `kubectl kustomize` or `kustomize` is
installed, the `kustomize` check also renders with it and compares the two. Needs PyYAML
(Debian: python3-yaml).
"""

import argparse
import copy
import fnmatch
import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile

try:
    import yaml
except ImportError:  # pragma: no cover - reported to the C test as a failure
    print("FAIL: PyYAML is missing: apt-get install python3-yaml (tools/deps.sh)")
    sys.exit(1)

# ---------------------------------------------------------------------------------------
# What the repository promises, in one place

K8S = "deploy/kubernetes"
OVERLAYS = ["overlays/dev", "overlays/prod"]
KILN_PATH = "/usr/local/bin/kiln"            # where the images install build/kiln
ENTRYPOINT_SCRIPT = "docker/entrypoint.sh"
IMAGES = {"kiln-worker": "docker/Dockerfile.worker", "kiln-scheduler": "docker/Dockerfile.scheduler"}
WORKER_DRAIN_S = 30                           # worker/client.c drain_ms: SIGTERM grace must exceed it

# (apiVersion, kind) pairs that exist; a manifest with another pair is a typo or a guess.
API_KINDS = {
    ("v1", "Namespace"), ("v1", "ServiceAccount"), ("v1", "ConfigMap"), ("v1", "Secret"),
    ("v1", "Service"), ("v1", "PersistentVolumeClaim"), ("v1", "LimitRange"), ("v1", "ResourceQuota"),
    ("apps/v1", "Deployment"), ("apps/v1", "StatefulSet"), ("apps/v1", "DaemonSet"),
    ("batch/v1", "Job"), ("batch/v1", "CronJob"),
    ("policy/v1", "PodDisruptionBudget"),
    ("networking.k8s.io/v1", "NetworkPolicy"), ("networking.k8s.io/v1", "Ingress"),
    ("autoscaling/v2", "HorizontalPodAutoscaler"),
    ("scheduling.k8s.io/v1", "PriorityClass"),
    ("rbac.authorization.k8s.io/v1", "Role"), ("rbac.authorization.k8s.io/v1", "RoleBinding"),
    ("monitoring.coreos.com/v1", "ServiceMonitor"), ("monitoring.coreos.com/v1", "PodMonitor"),
    ("monitoring.coreos.com/v1", "PrometheusRule"),
    ("kustomize.config.k8s.io/v1beta1", "Kustomization"),
    ("kustomize.config.k8s.io/v1alpha1", "Component"),
}
CLUSTER_SCOPED = {"Namespace", "PriorityClass", "ClusterRole", "ClusterRoleBinding"}
WORKLOADS = {"Deployment", "StatefulSet", "DaemonSet", "Job"}
# Volume types the restricted Pod Security Standard allows.
PSS_VOLUMES = {"configMap", "secret", "emptyDir", "persistentVolumeClaim", "projected",
               "downwardAPI", "csi", "ephemeral"}

# -l flags of the Makefile's LDLIBS -> the -dev package that provides them (Debian and
# Ubuntu agree), and the runtime package per base image. None: part of libc or static.
LIB_DEV = {"png": "libpng-dev", "z": "zlib1g-dev", "jansson": "libjansson-dev",
           "curl": "libcurl4-openssl-dev", "crypto": "libssl-dev", "zmq": "libzmq3-dev",
           "microhttpd": "libmicrohttpd-dev", "m": None, "pthread": None, "dl": None,
           "rt": None, "cudart_static": None, "stdc++": None}
LIB_RUNTIME = {
    "debian12": {"png": "libpng16-16", "z": "zlib1g", "jansson": "libjansson4", "curl": "libcurl4",
                 "crypto": "libssl3", "zmq": "libzmq5", "microhttpd": "libmicrohttpd12"},
    "ubuntu24.04": {"png": "libpng16-16t64", "z": "zlib1g", "jansson": "libjansson4",
                    "curl": "libcurl4t64", "crypto": "libssl3t64", "zmq": "libzmq5",
                    "microhttpd": "libmicrohttpd12t64"},
}
# DT_NEEDED sonames of build/kiln -> the LDLIBS name above; None: in every base image.
SONAME_LIB = {"libpng16.so.16": "png", "libz.so.1": "z", "libjansson.so.4": "jansson",
              "libcurl.so.4": "curl", "libcrypto.so.3": "crypto", "libssl.so.3": "crypto",
              "libzmq.so.5": "zmq", "libmicrohttpd.so.12": "microhttpd",
              "libc.so.6": None, "libm.so.6": None, "libpthread.so.0": None, "libdl.so.2": None,
              "librt.so.1": None, "ld-linux-x86-64.so.2": None, "libstdc++.so.6": None,
              "libgcc_s.so.1": None}

# Secret-looking environment names must come from a Secret, never a literal value.
SECRET_ENV = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|ACCESS_KEY|PRIVATE)", re.I)
# The published CURVE test vectors of the ZeroMQ test suite (RFC 26): public knowledge,
# so they are fake placeholders by construction. The dev overlay uses them.
ZMQ_TEST_KEYS = {
    "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7", "JTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh6",
    "Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID", "D:)Q[IlAW!ahhC2ac:9*A}h:p?([4%wOTJ%JR%cs",
}
LEAKS = [re.compile(p) for p in (r"AKIA[0-9A-Z]{16}", r"-----BEGIN [A-Z ]*PRIVATE KEY-----",
                                 r"aws_secret_access_key\s*=\s*[A-Za-z0-9/+]{40}")]


class Report:
    def __init__(self):
        self.failures = 0

    def fail(self, msg):
        self.failures += 1
        print("FAIL: " + msg)

    def check(self, cond, msg):
        if not cond:
            self.fail(msg)
        return cond

    def note(self, msg):
        print("note: " + msg)


R = Report()
ROOT = "."


def rel(*parts):
    return os.path.join(ROOT, *parts)


def read(path):
    with open(rel(path), encoding="utf-8") as f:
        return f.read()


# ---------------------------------------------------------------------------------------
# YAML and a Kustomize subset

def load_docs(path):
    with open(path, encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def k8s_yaml_files():
    out = []
    for dirpath, _, files in os.walk(rel(K8S)):
        for name in files:
            if name.endswith((".yaml", ".yml")):
                out.append(os.path.relpath(os.path.join(dirpath, name), ROOT))
    return sorted(out)


def is_kustomization(path):
    return os.path.basename(path) in ("kustomization.yaml", "kustomization.yml", "Kustomization")


def kustomization(dirpath):
    for name in ("kustomization.yaml", "kustomization.yml", "Kustomization"):
        p = os.path.join(dirpath, name)
        if os.path.exists(p):
            docs = load_docs(p)
            return p, (docs[0] if docs else {})
    raise FileNotFoundError("no kustomization.yaml in " + os.path.relpath(dirpath, ROOT))


def obj_id(o):
    md = o.get("metadata") or {}
    return (o.get("kind"), md.get("name"))


def smp_merge(base, patch):
    """Strategic merge, the parts Kubernetes objects here need: maps merge, lists of maps
    with a "name" (containers, env, volumes, ports, mounts) merge by name, other lists are
    replaced, and null deletes."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for k, v in patch.items():
            if v is None:
                out.pop(k, None)
            elif k in out:
                out[k] = smp_merge(out[k], v)
            else:
                out[k] = copy.deepcopy(v)
        return out
    if (isinstance(base, list) and isinstance(patch, list) and patch
            and all(isinstance(x, dict) and "name" in x for x in base + patch)):
        out = [copy.deepcopy(x) for x in base]
        index = {x["name"]: i for i, x in enumerate(out)}
        front = []
        for p in patch:
            if p["name"] in index:
                out[index[p["name"]]] = smp_merge(out[index[p["name"]]], p)
            else:
                front.append(copy.deepcopy(p))
        return front + out
    return copy.deepcopy(patch)


def pod_containers(o):
    spec = pod_spec(o)
    if not spec:
        return []
    return (spec.get("initContainers") or []) + (spec.get("containers") or [])


def pod_spec(o):
    if o.get("kind") in WORKLOADS:
        return (((o.get("spec") or {}).get("template") or {}).get("spec")) or {}
    return None


def split_image(image):
    """name, tag (or None) of an image reference; a digest counts as a tag."""
    if "@" in image:
        name, digest = image.split("@", 1)
        return name, "@" + digest
    last = image.rsplit("/", 1)[-1]
    if ":" in last:
        return image[: image.rfind(":")], image[image.rfind(":") + 1:]
    return image, None


def generate(kind, spec, dirpath, options):
    data = {}
    for lit in spec.get("literals") or []:
        k, _, v = lit.partition("=")
        data[k] = v
    for f in spec.get("files") or []:
        k, _, p = f.partition("=")
        path = os.path.join(dirpath, p or k)
        if not os.path.exists(path):
            raise FileNotFoundError("%s file %s does not exist" % (kind, os.path.relpath(path, ROOT)))
        with open(path, encoding="utf-8") as fh:
            data[os.path.basename(k)] = fh.read()
    for e in spec.get("envs") or []:
        path = os.path.join(dirpath, e)
        if not os.path.exists(path):
            raise FileNotFoundError("%s env file %s does not exist" % (kind, os.path.relpath(path, ROOT)))
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                line = line.strip()
                if line and not line.startswith("#"):
                    k, _, v = line.partition("=")
                    data[k] = v
    o = {"apiVersion": "v1", "kind": kind, "metadata": {"name": spec["name"]}}
    if kind == "Secret":
        o["type"] = spec.get("type", "Opaque")
        o["stringData"] = data  # plain strings: what the checks look at
    else:
        o["data"] = data
    if spec.get("namespace"):
        o["metadata"]["namespace"] = spec["namespace"]
    return o


def render(dirpath, seen=None):
    """Renders a kustomization directory (absolute path) into a list of objects."""
    seen = seen or set()
    if dirpath in seen:
        raise ValueError("kustomization cycle at " + dirpath)
    seen = seen | {dirpath}
    kpath, k = kustomization(dirpath)
    where = os.path.relpath(kpath, ROOT)
    for key in ("apiVersion", "kind"):
        if key in k and (k.get("apiVersion"), k.get("kind")) not in API_KINDS:
            raise ValueError("%s: unknown apiVersion/kind %s/%s" % (where, k.get("apiVersion"), k.get("kind")))
    objs = []
    for r in (k.get("resources") or []) + (k.get("bases") or []) + (k.get("components") or []):
        p = os.path.normpath(os.path.join(dirpath, r))
        if os.path.isdir(p):
            objs += render(p, seen)
        elif os.path.isfile(p):
            objs += load_docs(p)
        else:
            raise FileNotFoundError("%s: resource %s does not exist" % (where, r))
    opts = k.get("generatorOptions") or {}
    for g in k.get("configMapGenerator") or []:
        objs.append(generate("ConfigMap", g, dirpath, opts))
    for g in k.get("secretGenerator") or []:
        objs.append(generate("Secret", g, dirpath, opts))
    patches = [{"path": p} for p in k.get("patchesStrategicMerge") or []] + list(k.get("patches") or [])
    for p in patches:
        if "path" in p:
            ppath = os.path.join(dirpath, p["path"])
            if not os.path.isfile(ppath):
                raise FileNotFoundError("%s: patch %s does not exist" % (where, p["path"]))
            docs = load_docs(ppath)
        else:
            docs = list(yaml.safe_load_all(p["patch"]))
        for d in docs:
            if isinstance(d, list):
                raise ValueError("%s: JSON 6902 patches are not supported by this checker" % where)
            target = p.get("target") or {}
            kind = target.get("kind") or d.get("kind")
            name = target.get("name") or (d.get("metadata") or {}).get("name")
            hits = [i for i, o in enumerate(objs) if obj_id(o) == (kind, name)]
            if not hits:
                raise ValueError("%s: patch %s targets %s/%s, which no resource defines"
                                 % (where, p.get("path", "(inline)"), kind, name))
            for i in hits:
                objs[i] = smp_merge(objs[i], {kk: vv for kk, vv in d.items() if kk not in ("apiVersion", "kind")})
    ns = k.get("namespace")
    if ns:
        for o in objs:
            if o.get("kind") not in CLUSTER_SCOPED:
                o.setdefault("metadata", {})["namespace"] = ns
    for r in k.get("replicas") or []:
        hits = [o for o in objs if (o.get("metadata") or {}).get("name") == r["name"] and o.get("kind") in WORKLOADS]
        if not hits:
            raise ValueError("%s: replicas for %s, which no workload has" % (where, r["name"]))
        for o in hits:
            o["spec"]["replicas"] = r["count"]
    for im in k.get("images") or []:
        used = False
        for o in objs:
            for c in pod_containers(o):
                name, tag = split_image(c.get("image", ""))
                if name == im["name"]:
                    used = True
                    name = im.get("newName", name)
                    if "digest" in im:
                        tag = "@" + im["digest"]
                    elif "newTag" in im:
                        tag = str(im["newTag"])
                    c["image"] = name + ("" if tag is None else (tag if tag.startswith("@") else ":" + tag))
        if not used:
            raise ValueError("%s: image %s is not used by any container" % (where, im["name"]))
    return objs


def kubectl_render(dirpath):
    """Renders with a real kustomize when one is installed, else None. Old kubectls (< 1.21)
    embed kustomize 2.0, which predates the syntax used here: they are not used."""
    if shutil.which("kustomize"):
        cmd = ["kustomize", "build", dirpath]
    elif shutil.which("kubectl"):
        try:
            v = json.loads(subprocess.run(["kubectl", "version", "--client", "-o", "json"],
                                          capture_output=True, text=True, timeout=20).stdout)
            minor = int(re.sub(r"\D", "", v["clientVersion"]["minor"]) or 0)
            if int(v["clientVersion"]["major"]) < 1 or minor < 21:
                return None
        except Exception:
            return None
        cmd = ["kubectl", "kustomize", dirpath]
    else:
        return None
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        R.fail("%s failed on %s: %s" % (" ".join(cmd[:2]), os.path.relpath(dirpath, ROOT), p.stderr.strip()))
        return []
    return [d for d in yaml.safe_load_all(p.stdout) if d is not None]


RENDERED = {}
RENDER_ERRORS = {}


def rendered(name):
    """Objects of base or an overlay (relative to deploy/kubernetes), rendered once; a
    rendering error is reported to every check that asks."""
    if name not in RENDERED:
        try:
            RENDERED[name] = render(os.path.abspath(rel(K8S, name)))
        except (FileNotFoundError, ValueError, KeyError, TypeError, yaml.YAMLError) as e:
            RENDER_ERRORS[name] = str(e)
            RENDERED[name] = []
    if name in RENDER_ERRORS:
        R.fail("rendering %s: %s" % (name, RENDER_ERRORS[name]))
    return RENDERED[name]


def by_kind(objs, kind):
    return [o for o in objs if o.get("kind") == kind]


def component(o):
    return ((o.get("metadata") or {}).get("labels") or {}).get("app.kubernetes.io/component")


def workload(objs, kind, comp):
    hits = [o for o in by_kind(objs, kind) if component(o) == comp]
    return hits[0] if len(hits) == 1 else None


def env_map(container):
    return {e["name"]: e for e in container.get("env") or []}


def env_value(container, name):
    e = env_map(container).get(name)
    return None if e is None else e.get("value")


def labels_match(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


# ---------------------------------------------------------------------------------------
# Dockerfiles

class Dockerfile:
    def __init__(self, path):
        self.path = path
        self.args = {}
        self.stages = []  # dicts: name, image, lines [(instr, rest)]
        text = read(path)
        logical, cur = [], ""
        for line in text.splitlines():
            s = line.strip()
            if not cur and (not s or s.startswith("#")):
                continue
            if cur and s.startswith("#"):
                continue
            if s.endswith("\\"):
                cur += s[:-1] + " "
                continue
            cur += s
            logical.append(cur)
            cur = ""
        for ln in logical:
            instr, _, rest = ln.partition(" ")
            instr = instr.upper()
            rest = rest.strip()
            if instr == "ARG" and not self.stages:
                k, _, v = rest.partition("=")
                self.args[k] = v
            elif instr == "FROM":
                parts = rest.split()
                parts = [p for p in parts if not p.startswith("--")]
                image = self.subst(parts[0])
                name = parts[2] if len(parts) >= 3 and parts[1].upper() == "AS" else str(len(self.stages))
                self.stages.append({"name": name, "image": image, "lines": []})
            elif self.stages:
                self.stages[-1]["lines"].append((instr, rest))

    def subst(self, s):
        return re.sub(r"\$\{?(\w+)\}?", lambda m: self.args.get(m.group(1), m.group(0)), s)

    def lines(self, stage, instr):
        return [rest for i, rest in stage["lines"] if i == instr]

    @property
    def final(self):
        return self.stages[-1]

    def workdir(self, stage):
        wd = "/"
        for instr, rest in stage["lines"]:
            if instr == "WORKDIR":
                wd = os.path.join(wd, rest)
        return wd

    def env(self, stage):
        out = {}
        for rest in self.lines(stage, "ENV"):
            for tok in shlex.split(rest):
                if "=" in tok:
                    k, _, v = tok.partition("=")
                    out[k] = v
        return out

    def copies(self, stage):
        """(from_stage or None, [sources], dest) per COPY/ADD."""
        out = []
        for instr, rest in stage["lines"]:
            if instr not in ("COPY", "ADD"):
                continue
            toks = rest.split()
            frm = None
            while toks and toks[0].startswith("--"):
                if toks[0].startswith("--from="):
                    frm = toks[0][len("--from="):]
                toks.pop(0)
            out.append((frm, toks[:-1], toks[-1]))
        return out

    def exec_form(self, stage, instr):
        vals = self.lines(stage, instr)
        if not vals:
            return None
        v = vals[-1]
        if instr == "HEALTHCHECK":
            m = re.search(r"\bCMD\s+(.*)$", v)
            v = m.group(1) if m else ""
        try:
            arr = json.loads(v)
            return arr if isinstance(arr, list) else v
        except ValueError:
            return v

    def apt_packages(self, stage):
        pkgs = []
        for rest in self.lines(stage, "RUN"):
            for m in re.finditer(r"apt-get install ((?:[^&;|])*)", rest):
                pkgs += [t for t in m.group(1).split() if not t.startswith("-")]
        return pkgs


def dockerignore_included(patterns, path):
    """Docker's rule: the last pattern matching the path or one of its parents wins."""
    parts = path.split("/")
    included = True
    for neg, pat in patterns:
        for i in range(1, len(parts) + 1):
            prefix = "/".join(parts[:i])
            if fnmatch.fnmatchcase(prefix, pat) or (pat.startswith("**/") and
                                                     fnmatch.fnmatchcase(prefix.rsplit("/", 1)[-1], pat[3:])):
                included = neg
                break
    return included


def dockerignore():
    pats = []
    if os.path.exists(rel(".dockerignore")):
        for line in read(".dockerignore").splitlines():
            s = line.strip()
            if not s or s.startswith("#"):
                continue
            neg = s.startswith("!")
            s = s[1:] if neg else s
            pats.append((neg, s.strip("/")))
    return pats


def makefile_vars():
    out = {}
    for line in read("Makefile").splitlines():
        m = re.match(r"^(\w+)\s*[:?+]?=\s*(.*)$", line)
        if m and m.group(1) not in out:
            out[m.group(1)] = m.group(2)
    return out


def ldlibs():
    libs = []
    for line in read("Makefile").splitlines():
        if re.match(r"^\s*LDLIBS\s*\+?=", line):
            libs += re.findall(r"(?:^|\s)-l([\w+.-]+)", line)
    return libs


def source_dirs():
    """Top-level folders whose sources `make build/kiln` compiles (the Makefile's wildcards)."""
    mv = makefile_vars()
    dirs = set()
    for var in ("LIB_SRCS", "CU_SRCS", "CLI_SRCS"):
        for pat in re.findall(r"[\w./*]+", mv.get(var, "")):
            if "/" in pat:
                dirs.add(pat.split("/")[0])
    return sorted(dirs)


def deps_sh_packages():
    m = re.search(r'pkgs="([^"]*)"', read("tools/deps.sh"))
    return set(m.group(1).split()) if m else set()


def needed_sonames(kiln):
    if not kiln or not shutil.which("readelf"):
        return None
    p = subprocess.run(["readelf", "-d", kiln], capture_output=True, text=True)
    if p.returncode != 0:
        return None
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", p.stdout)


def image_uid(df):
    users = df.lines(df.final, "USER")
    if not users:
        return None
    u = users[-1].split(":")[0]
    return int(u) if u.isdigit() else u


# ---------------------------------------------------------------------------------------
# The checks

def check_yaml():
    files = k8s_yaml_files()
    R.check(files, "no YAML under " + K8S)
    referenced = set()
    for f in files:
        try:
            docs = load_docs(rel(f))
        except yaml.YAMLError as e:
            R.fail("%s does not parse: %s" % (f, e))
            continue
        R.check(docs, "%s holds no document" % f)
        for i, d in enumerate(docs):
            where = "%s (document %d)" % (f, i + 1)
            if not R.check(isinstance(d, dict), where + ": not a mapping"):
                continue
            pair = (d.get("apiVersion"), d.get("kind"))
            if is_kustomization(f):
                R.check(pair == ("kustomize.config.k8s.io/v1beta1", "Kustomization"),
                        "%s: a kustomization must be kustomize.config.k8s.io/v1beta1 Kustomization, not %s/%s"
                        % (where, pair[0], pair[1]))
                base = os.path.dirname(rel(f))
                for key in ("resources", "bases", "components", "patchesStrategicMerge"):
                    for r in d.get(key) or []:
                        referenced.add(os.path.normpath(os.path.join(base, r)))
                for p in d.get("patches") or []:
                    if "path" in p:
                        referenced.add(os.path.normpath(os.path.join(base, p["path"])))
                continue
            R.check(pair in API_KINDS, "%s: %s/%s is not a known apiVersion/kind pair" % (where, pair[0], pair[1]))
            md = d.get("metadata") or {}
            R.check(isinstance(md.get("name"), str) and re.match(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", md["name"]),
                    "%s: metadata.name missing or not a DNS name" % where)
            for key in ("labels", "annotations"):
                for k, v in (md.get(key) or {}).items():
                    R.check(isinstance(v, str), "%s: %s %s must be a string (quote it)" % (where, key, k))
    for f in files:
        if not is_kustomization(f):
            R.check(os.path.normpath(rel(f)) in referenced,
                    "%s is referenced by no kustomization (resources or patches)" % f)


def check_kustomize():
    for name in ["base"] + OVERLAYS:
        objs = rendered(name)
        R.check(objs, "%s renders to nothing" % name)
        ids = [(o.get("kind"), (o.get("metadata") or {}).get("name")) for o in objs]
        R.check(len(ids) == len(set(ids)), "%s renders duplicate objects: %s" % (name, ids))
        for kind in ("StatefulSet", "Deployment", "Service"):
            R.check(by_kind(objs, kind), "%s renders no %s" % (name, kind))
        if name != "base":
            for o in objs:
                if o.get("kind") not in CLUSTER_SCOPED:
                    R.check((o.get("metadata") or {}).get("namespace"),
                            "%s: %s/%s has no namespace" % (name, o.get("kind"), obj_id(o)[1]))
        real = kubectl_render(os.path.abspath(rel(K8S, name)))
        if real is None:
            continue
        rid = sorted((o.get("kind"), o["metadata"]["name"], o["metadata"].get("namespace")) for o in real)
        mid = sorted((o.get("kind"), o["metadata"]["name"], o["metadata"].get("namespace")) for o in objs)
        R.check(rid == mid, "%s: kustomize renders %s, this checker %s" % (name, rid, mid))
        for o in real:
            mine = [m for m in objs if obj_id(m) == obj_id(o)]
            if not mine:
                continue
            for a, b in zip(pod_containers(o), pod_containers(mine[0])):
                R.check(a.get("image") == b.get("image"),
                        "%s: %s image: kustomize %s, checker %s" % (name, obj_id(o), a.get("image"), b.get("image")))
                R.check(env_map(a).keys() == env_map(b).keys(),
                        "%s: %s env differs from kustomize's" % (name, obj_id(o)))
                R.check(a.get("resources") == b.get("resources"),
                        "%s: %s resources differ from kustomize's" % (name, obj_id(o)))
            if o.get("kind") in WORKLOADS:
                R.check(o["spec"].get("replicas") == mine[0]["spec"].get("replicas"),
                        "%s: %s replicas differ from kustomize's" % (name, obj_id(o)))
        print("ok: %s rendered by kustomize matches" % name)


def check_pod(name, o, uid):
    where = "%s: %s/%s" % (name, o["kind"], o["metadata"]["name"])
    spec = pod_spec(o)
    tmpl_labels = ((o["spec"].get("template") or {}).get("metadata") or {}).get("labels") or {}
    sel = (o["spec"].get("selector") or {}).get("matchLabels") or {}
    R.check(labels_match(sel, tmpl_labels), where + ": selector does not match the pod template's labels")
    psc = spec.get("securityContext") or {}
    R.check(psc.get("runAsNonRoot") is True, where + ": pod securityContext.runAsNonRoot must be true")
    R.check(psc.get("runAsUser") == uid,
            "%s: runAsUser %s differs from the image's USER %s" % (where, psc.get("runAsUser"), uid))
    R.check(not spec.get("hostNetwork") and not spec.get("hostPID") and not spec.get("hostIPC"),
            where + ": host namespaces are not needed")
    R.check(spec.get("automountServiceAccountToken") is False, where + ": kiln needs no API token in its pods")
    volumes = {v["name"]: v for v in spec.get("volumes") or []}
    claims = {(c.get("metadata") or {}).get("name") for c in o["spec"].get("volumeClaimTemplates") or []}
    for v in volumes.values():
        types = set(v) - {"name"}
        R.check(types <= PSS_VOLUMES, "%s: volume %s is of a type (%s) the restricted policy refuses"
                % (where, v["name"], ", ".join(sorted(types))))
        if "secret" in v:
            mode = v["secret"].get("defaultMode", 0o644)
            if not mode & 0o004:
                R.check(psc.get("fsGroup") is not None,
                        "%s: secret volume %s (mode %o) is unreadable for user %s without an fsGroup"
                        % (where, v["name"], mode, uid))
    used = set()
    for c in pod_containers(o):
        cw = "%s container %s" % (where, c.get("name"))
        csc = c.get("securityContext") or {}
        R.check(csc.get("allowPrivilegeEscalation") is False, cw + ": allowPrivilegeEscalation must be false")
        R.check("ALL" in ((csc.get("capabilities") or {}).get("drop") or []), cw + ": must drop ALL capabilities")
        R.check(csc.get("readOnlyRootFilesystem") is True, cw + ": readOnlyRootFilesystem must be true")
        R.check(((csc.get("seccompProfile") or psc.get("seccompProfile") or {}).get("type")) == "RuntimeDefault",
                cw + ": seccompProfile RuntimeDefault")
        res = c.get("resources") or {}
        for k in ("cpu", "memory"):
            R.check(k in (res.get("requests") or {}), "%s: resources.requests.%s missing" % (cw, k))
        R.check("memory" in (res.get("limits") or {}), cw + ": resources.limits.memory missing")
        for probe in ("readinessProbe", "livenessProbe"):
            R.check(probe in c, "%s: %s missing" % (cw, probe))
        ports = {p.get("name"): p.get("containerPort") for p in c.get("ports") or []}
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            hg = (c.get(probe) or {}).get("httpGet")
            if hg and isinstance(hg.get("port"), str):
                R.check(hg["port"] in ports, "%s: %s port %s is no container port" % (cw, probe, hg["port"]))
        mounts = {}
        for m in c.get("volumeMounts") or []:
            used.add(m["name"])
            R.check(m["name"] in volumes or m["name"] in claims,
                    "%s: mount %s names no volume or claim template" % (cw, m["name"]))
            mounts[m["mountPath"]] = m["name"]
        R.check("/tmp" in mounts, cw + ": a read-only root needs a writable /tmp (emptyDir)")
        # every *_FILE variable names a file under a secret mount
        for e in c.get("env") or []:
            if e["name"].endswith("_FILE") and "value" in e:
                path = e["value"]
                mdir = os.path.dirname(path)
                vol = volumes.get(mounts.get(mdir))
                if R.check(vol is not None and "secret" in vol,
                           "%s: %s=%s is not in a mounted Secret" % (cw, e["name"], path)):
                    SECRET_KEYS_USED.setdefault(vol["secret"]["secretName"], set()).add(os.path.basename(path))
        for e in c.get("env") or []:
            ref = (e.get("valueFrom") or {}).get("secretKeyRef")
            if ref:
                SECRET_KEYS_USED.setdefault(ref["name"], set()).add(ref["key"])
    for v in volumes:
        R.check(v in used, "%s: volume %s is mounted nowhere" % (where, v))


SECRET_KEYS_USED = {}  # secret name -> keys the pods read


def entrypoint_variables():
    """KILN_* variables docker/entrypoint.sh maps to flags (its "--flag=VAR" words), plus
    those kiln reads itself (the log level; the worker's settings read with env_long in
    cli/worker.c, such as KILN_WORKER_THREADS)."""
    text = read(ENTRYPOINT_SCRIPT) if os.path.exists(rel(ENTRYPOINT_SCRIPT)) else ""
    worker = read("cli/worker.c") if os.path.exists(rel("cli/worker.c")) else ""
    return (set(re.findall(r"--[\w-]+=@?(KILN_\w+)", text)) | {"KILN_LOG_LEVEL"}
            | set(re.findall(r'env_long\([^,]+,\s*"(KILN_\w+)"', worker)))


def cpu_quantity(q):
    """A Kubernetes CPU quantity ("4", "500m", 2.5) in CPUs, or None."""
    m = re.match(r"^(\d+(?:\.\d+)?)(m?)$", str(q))
    if not m:
        return None
    return float(m.group(1)) / (1000 if m.group(2) else 1)


def check_workloads():
    uid_w = image_uid(Dockerfile(IMAGES["kiln-worker"]))
    uid_s = image_uid(Dockerfile(IMAGES["kiln-scheduler"]))
    for name in ["base"] + OVERLAYS:
        objs = rendered(name)
        if not objs:
            continue
        sched = workload(objs, "StatefulSet", "scheduler")
        worker = workload(objs, "Deployment", "worker")
        if not R.check(sched and worker, "%s: needs one scheduler StatefulSet and one worker Deployment "
                       "(app.kubernetes.io/component)" % name):
            continue
        check_pod(name, sched, uid_s)
        check_pod(name, worker, uid_w)
        configmaps = {o["metadata"]["name"] for o in by_kind(objs, "ConfigMap")}
        known = entrypoint_variables()
        for o in (sched, worker):
            for c in pod_containers(o):
                for e in c.get("env") or []:
                    R.check(not e["name"].startswith("KILN_") or e["name"] in known,
                            "%s: %s sets %s, which neither %s nor kiln reads" % (name, o["metadata"]["name"],
                                                                                 e["name"], ENTRYPOINT_SCRIPT))
        for cm in by_kind(objs, "ConfigMap"):
            for k in cm.get("data") or {}:
                R.check(not k.startswith("KILN_") or k in known,
                        "%s: ConfigMap %s sets %s, which neither %s nor kiln reads" % (name, cm["metadata"]["name"],
                                                                                     k, ENTRYPOINT_SCRIPT))
        for o in (sched, worker):
            for c in pod_containers(o):
                for ef in c.get("envFrom") or []:
                    if "configMapRef" in ef:
                        R.check(ef["configMapRef"]["name"] in configmaps,
                                "%s: envFrom ConfigMap %s is not rendered" % (name, ef["configMapRef"]["name"]))
                image, tag = split_image(c.get("image", ""))
                base_name = image.rsplit("/", 1)[-1]
                want = "kiln-scheduler" if o is sched else "kiln-worker"
                R.check(base_name == want, "%s: %s runs image %s, expected %s (built by %s)"
                        % (name, o["metadata"]["name"], image, want, IMAGES[want]))
                if name != "base":
                    R.check(tag and tag != "latest", "%s: image %s needs a pinned tag" % (name, c.get("image")))
                R.check(not c.get("command"), "%s: %s overrides the image ENTRYPOINT; set env instead"
                        % (name, c.get("name")))

        # --- scheduler
        s = sched["spec"]
        sc = s["template"]["spec"]["containers"][0]
        R.check(s.get("replicas") == 1, "%s: the scheduler must run exactly 1 replica (one journal)" % name)
        vct = s.get("volumeClaimTemplates") or []
        R.check(vct, "%s: the scheduler needs a volumeClaimTemplate for its state dir" % name)
        state = env_value(sc, "KILN_STATE_DIR")
        mounts = {m["mountPath"]: m["name"] for m in sc.get("volumeMounts") or []}
        R.check(state and mounts.get(state) in {(v.get("metadata") or {}).get("name") for v in vct},
                "%s: KILN_STATE_DIR (%s) is not the mount of a volumeClaimTemplate" % (name, state))
        ports = {p["name"]: p["containerPort"] for p in sc.get("ports") or []}
        listen, http = env_value(sc, "KILN_LISTEN") or "", env_value(sc, "KILN_HTTP") or ""
        R.check(re.match(r"^tcp://[^:]+:\d+$", listen), "%s: KILN_LISTEN %r is not tcp://ADDR:PORT" % (name, listen))
        R.check(re.match(r"^[^:]+:\d+$", http), "%s: KILN_HTTP %r is not ADDR:PORT" % (name, http))
        R.check(ports.get("zmq") == int(listen.rsplit(":", 1)[-1] or 0),
                "%s: container port zmq (%s) differs from KILN_LISTEN" % (name, ports.get("zmq")))
        R.check(ports.get("http") == int(http.rsplit(":", 1)[-1] or 0),
                "%s: container port http (%s) differs from KILN_HTTP" % (name, ports.get("http")))
        for probe in ("readinessProbe", "livenessProbe"):
            hg = (sc.get(probe) or {}).get("httpGet") or {}
            R.check(hg.get("path") == "/healthz" and hg.get("port") in ("http", ports.get("http")),
                    "%s: scheduler %s must GET /healthz on the http port" % (name, probe))
        pod_labels = s["template"]["metadata"]["labels"]
        services = by_kind(objs, "Service")
        headless = [v for v in services if v["spec"].get("clusterIP") == "None"
                    and v["metadata"]["name"] == s.get("serviceName")]
        R.check(headless and labels_match(headless[0]["spec"].get("selector"), pod_labels),
                "%s: serviceName %s must be a headless Service selecting the scheduler" % (name, s.get("serviceName")))
        main = [v for v in services if v["spec"].get("clusterIP") != "None"
                and labels_match(v["spec"].get("selector"), pod_labels)]
        if R.check(len(main) == 1, "%s: one ClusterIP Service must select the scheduler" % name):
            svc = main[0]
            svc_ports = {p["name"]: p for p in svc["spec"]["ports"]}
            for pn in ("zmq", "http"):
                p = svc_ports.get(pn)
                if R.check(p, "%s: Service %s has no port %s" % (name, svc["metadata"]["name"], pn)):
                    R.check(p.get("targetPort") in (pn, ports.get(pn)),
                            "%s: Service port %s does not reach the container port" % (name, pn))

        # --- workers
        w = worker["spec"]
        wspec = w["template"]["spec"]
        wc = wspec["containers"][0]
        limits = (wc.get("resources") or {}).get("limits") or {}
        requests = (wc.get("resources") or {}).get("requests") or {}
        gpus = limits.get("nvidia.com/gpu")
        R.check(isinstance(gpus, int) and gpus >= 1, "%s: worker limits nvidia.com/gpu must be a whole number >= 1" % name)
        if "nvidia.com/gpu" in requests:
            R.check(requests["nvidia.com/gpu"] == gpus, "%s: GPU requests must equal limits" % name)
        R.check(any(t.get("key") == "nvidia.com/gpu" for t in wspec.get("tolerations") or []),
                "%s: workers need a toleration for nvidia.com/gpu" % name)
        R.check(wspec.get("nodeSelector"), "%s: workers need a nodeSelector for GPU nodes" % name)
        grace = wspec.get("terminationGracePeriodSeconds", 30)
        R.check(grace > WORKER_DRAIN_S, "%s: worker terminationGracePeriodSeconds %s must exceed the %d s drain"
                % (name, grace, WORKER_DRAIN_S))
        wdf = Dockerfile(IMAGES["kiln-worker"])
        installed = {dest for frm, srcs, dest in wdf.copies(wdf.final)}
        for probe in ("readinessProbe", "livenessProbe"):
            cmd = ((wc.get(probe) or {}).get("exec") or {}).get("command") or []
            R.check(cmd[:1] and cmd[0] in installed, "%s: worker %s runs %s, which %s does not install"
                    % (name, probe, cmd[:1], IMAGES["kiln-worker"]))
            R.check(KILN_PATH in cmd and cmd[cmd.index(KILN_PATH) + 1:cmd.index(KILN_PATH) + 2] == ["worker"]
                    and "--health" in cmd,
                    "%s: worker %s must exec %s worker --health, not %s" % (name, probe, KILN_PATH, cmd))
        slots = env_value(wc, "KILN_SLOTS")
        if slots is not None and isinstance(gpus, int):
            R.check(slots.isdigit() and gpus <= int(slots) <= 1024,
                    "%s: KILN_SLOTS %s: at least one per GPU (%s), at most 1024" % (name, slots, gpus))
        # The worker's host threads: kiln's default is the CPUs the pod may use (every core of
        # the node without a CPU limit), which pods sharing a node oversubscribe; when set,
        # no more than the CPUs the pod asks for.
        threads = env_value(wc, "KILN_WORKER_THREADS")
        if threads:
            cpus = cpu_quantity(requests.get("cpu"))
            R.check(threads.isdigit() and 1 <= int(threads) <= 1024,
                    "%s: KILN_WORKER_THREADS %r is not a whole number from 1 to 1024" % (name, threads))
            R.check(not threads.isdigit() or cpus is None or int(threads) <= max(1, int(cpus + 0.999)),
                    "%s: KILN_WORKER_THREADS %s is more than the worker's CPU request (%s)"
                    % (name, threads, requests.get("cpu")))
        target = env_value(wc, "KILN_SCHEDULER") or ""
        m = re.match(r"^tcp://([^:/]+):(\d+)$", target)
        if R.check(m, "%s: worker KILN_SCHEDULER %r is not tcp://HOST:PORT" % (name, target)) and main:
            svc = main[0]
            R.check(m.group(1) in (svc["metadata"]["name"], "%s.%s" % (svc["metadata"]["name"], svc["metadata"].get("namespace"))),
                    "%s: KILN_SCHEDULER host %s is not the scheduler Service %s" % (name, m.group(1), svc["metadata"]["name"]))
            zmq_port = {p["name"]: p["port"] for p in svc["spec"]["ports"]}.get("zmq")
            R.check(int(m.group(2)) == zmq_port, "%s: KILN_SCHEDULER port %s is not the Service's zmq port %s"
                    % (name, m.group(2), zmq_port))
        for pdb in by_kind(objs, "PodDisruptionBudget"):
            R.check(labels_match((pdb["spec"].get("selector") or {}).get("matchLabels"),
                                 w["template"]["metadata"]["labels"]),
                    "%s: PodDisruptionBudget %s selects no worker" % (name, pdb["metadata"]["name"]))
    print("ok: workloads checked in base, %s" % ", ".join(OVERLAYS))


def check_secrets():
    check_workloads_quiet()
    for name in ["base"] + OVERLAYS:
        objs = rendered(name)
        secrets = {o["metadata"]["name"]: o for o in by_kind(objs, "Secret")}
        if name != "overlays/dev":
            R.check(not secrets, "%s must create no Secret (referenced only): %s" % (name, sorted(secrets)))
        for o in objs:
            for c in pod_containers(o):
                for e in c.get("env") or []:
                    if SECRET_ENV.search(e["name"]) and not e["name"].endswith("_FILE"):
                        R.check("valueFrom" in e and "secretKeyRef" in e["valueFrom"],
                                "%s: %s sets %s inline; use valueFrom.secretKeyRef" % (name, o["metadata"]["name"], e["name"]))
        for o in by_kind(objs, "ConfigMap"):
            for k in (o.get("data") or {}):
                R.check(not SECRET_ENV.search(k), "%s: ConfigMap %s holds %s: secrets go in Secrets"
                        % (name, o["metadata"]["name"], k))
        if name == "overlays/dev":
            for sname, keys in SECRET_KEYS_USED.items():
                s = secrets.get(sname)
                if not R.check(s, "dev: Secret %s is used but not generated" % sname):
                    continue
                data = s.get("stringData") or s.get("data") or {}
                optional = {"AWS_SESSION_TOKEN"}
                for k in keys - optional:
                    R.check(k in data, "dev: Secret %s lacks key %s" % (sname, k))
            for sname, s in secrets.items():
                for k, v in (s.get("stringData") or s.get("data") or {}).items():
                    R.check("FAKE" in v.upper() or v.strip() in ZMQ_TEST_KEYS,
                            "dev: Secret %s key %s is not a clearly fake placeholder" % (sname, k))
    ops = read("docs/OPERATIONS.md") if os.path.exists(rel("docs/OPERATIONS.md")) else ""
    for sname, keys in sorted(SECRET_KEYS_USED.items()):
        for k in sorted(keys):
            R.check(re.search(re.escape(sname) + r".*" + re.escape(k), ops),
                    "docs/OPERATIONS.md does not tell how to create Secret %s with key %s (one line naming both)"
                    % (sname, k))
    # nothing that looks like a real credential anywhere in deploy/ or docker/
    for top in ("deploy", "docker"):
        for dirpath, _, files in os.walk(rel(top)):
            for fn in files:
                p = os.path.join(dirpath, fn)
                with open(p, encoding="utf-8", errors="replace") as f:
                    text = f.read()
                for pat in LEAKS:
                    R.check(not pat.search(text), "%s holds something like a real credential (%s)"
                            % (os.path.relpath(p, ROOT), pat.pattern))
    print("ok: secrets referenced: %s" % ", ".join("%s[%s]" % (k, ",".join(sorted(v)))
                                                   for k, v in sorted(SECRET_KEYS_USED.items())))


def check_workloads_quiet():
    """Collects SECRET_KEYS_USED without reporting the workload checks twice."""
    global R
    saved, R = R, Report()
    import io
    import contextlib
    with contextlib.redirect_stdout(io.StringIO()):
        check_workloads()
    R = saved


def check_prometheus():
    for name in ["base"] + OVERLAYS:
        objs = rendered(name)
        sched = workload(objs, "StatefulSet", "scheduler")
        if not sched:
            R.fail("%s: no scheduler" % name)
            continue
        sc = sched["spec"]["template"]["spec"]["containers"][0]
        http_port = {p["name"]: p["containerPort"] for p in sc.get("ports") or []}.get("http")
        pod_labels = sched["spec"]["template"]["metadata"]["labels"]
        annotated = []
        for o in by_kind(objs, "Service") + [sched["spec"]["template"]]:
            ann = (o.get("metadata") or {}).get("annotations") or {}
            if ann.get("prometheus.io/scrape") == "true":
                annotated.append(o)
                svc_port = None
                if o.get("kind") == "Service":
                    ports = {p["name"]: p for p in o["spec"]["ports"]}
                    svc_port = (ports.get("http") or {}).get("port")
                R.check(ann.get("prometheus.io/port") in (str(http_port), str(svc_port)),
                        "%s: prometheus.io/port %s is not the http port" % (name, ann.get("prometheus.io/port")))
                R.check(ann.get("prometheus.io/path", "/metrics") == "/metrics", "%s: prometheus.io/path" % name)
        monitors = by_kind(objs, "ServiceMonitor")
        R.check(annotated or monitors, "%s: no Prometheus scrape configuration (annotations or ServiceMonitor)" % name)
        token_secret = None
        for v in sched["spec"]["template"]["spec"].get("volumes") or []:
            mounts = {m["name"]: m["mountPath"] for m in sc.get("volumeMounts") or []}
            tf = env_value(sc, "KILN_TOKEN_FILE") or ""
            if "secret" in v and mounts.get(v["name"]) and tf.startswith(mounts[v["name"]] + "/"):
                token_secret = (v["secret"]["secretName"], os.path.basename(tf))
        for m in monitors:
            sel = (m["spec"].get("selector") or {}).get("matchLabels") or {}
            hits = [s for s in by_kind(objs, "Service") if labels_match(sel, s["metadata"].get("labels") or {})]
            if not R.check(len(hits) == 1, "%s: ServiceMonitor %s must select exactly one Service, selects %s"
                           % (name, m["metadata"]["name"], [h["metadata"]["name"] for h in hits])):
                continue
            R.check(labels_match(hits[0]["spec"].get("selector"), pod_labels),
                    "%s: ServiceMonitor's Service does not select the scheduler" % name)
            pnames = {p["name"] for p in hits[0]["spec"]["ports"]}
            for ep in m["spec"].get("endpoints") or []:
                R.check(ep.get("port") in pnames, "%s: ServiceMonitor port %s is not on the Service" % (name, ep.get("port")))
                R.check(ep.get("path", "/metrics") == "/metrics", "%s: ServiceMonitor path" % name)
                if token_secret:
                    cred = ((ep.get("authorization") or {}).get("credentials") or ep.get("bearerTokenSecret") or {})
                    R.check((cred.get("name"), cred.get("key")) == token_secret,
                            "%s: /metrics needs the REST token: ServiceMonitor must send Secret %s key %s"
                            % (name, token_secret[0], token_secret[1]))
    print("ok: Prometheus scrape configuration")


def check_docker(kiln):
    pats = dockerignore()
    R.check(pats, ".dockerignore is missing or empty")
    for junk in ("build", "build-dep", ".git", "out", "tools/node_modules", "../shared"):
        if not junk.startswith(".."):
            R.check(not dockerignore_included(pats, junk + "/x"), ".dockerignore lets %s/ into the context" % junk)
    dirs = source_dirs()
    R.check(dirs, "no source folders found in the Makefile's *_SRCS")
    needed = ["Makefile", "tools/deps.sh"]
    for d in dirs:
        for dirpath, _, files in os.walk(rel(d)):
            for fn in files:
                if fn.endswith((".c", ".h", ".cu", ".cuh", ".cpp")):
                    needed.append(os.path.relpath(os.path.join(dirpath, fn), ROOT))
    for f in needed:
        R.check(dockerignore_included(pats, f), ".dockerignore excludes %s, which `make build/kiln` needs" % f)
    libs = ldlibs()
    unknown = [l for l in libs if l not in LIB_DEV]
    R.check(not unknown, "Makefile LDLIBS has libraries this checker cannot map to packages: %s "
            "(add them to LIB_DEV/LIB_RUNTIME in tests/tools/check_manifests.py and the Dockerfiles)" % unknown)
    sonames = needed_sonames(kiln)
    if sonames is None:
        R.note("no %s to read DT_NEEDED from; checking LDLIBS only" % kiln)
        sonames = []
    deps = deps_sh_packages()
    for image, path in sorted(IMAGES.items()):
        if not R.check(os.path.exists(rel(path)), "%s is missing" % path):
            continue
        df = Dockerfile(path)
        sub = image.split("-", 1)[1]
        R.check(len(df.stages) >= 2, "%s: must be multi-stage (build, runtime)" % path)
        if len(df.stages) < 2:
            continue
        build, final = df.stages[0], df.final
        runs = " ".join(df.lines(build, "RUN"))
        R.check(re.search(r"\bmake\b[^&;]*\bbuild/kiln\b", runs), "%s: the build stage must run make build/kiln" % path)
        # sources
        copied = set()
        for frm, srcs, dest in df.copies(build):
            for s in srcs:
                if frm is None:
                    copied.add(s.strip("./").rstrip("/"))
        for frm, srcs, dest in df.copies(build) + df.copies(final):
            if frm is not None:
                R.check(frm in [s["name"] for s in df.stages[:-1]], "%s: COPY --from=%s names no earlier stage" % (path, frm))
                continue
            for s in srcs:
                R.check(os.path.exists(rel(s)), "%s: COPY source %s does not exist" % (path, s))
                R.check(dockerignore_included(pats, s.strip("./").rstrip("/") or "."),
                        "%s: COPY source %s is excluded by .dockerignore" % (path, s))
        for f in ["Makefile"] + dirs:
            R.check(f in copied, "%s: the build stage does not COPY %s" % (path, f))
        # the binary
        bin_src = os.path.join(df.workdir(build), "build/kiln")
        copied_bin = [(srcs, dest) for frm, srcs, dest in df.copies(final) if frm == build["name"]]
        R.check(any(bin_src in srcs and dest == KILN_PATH for srcs, dest in copied_bin),
                "%s: the runtime stage must COPY --from=%s %s %s" % (path, build["name"], bin_src, KILN_PATH))
        final_files = {dest for frm, srcs, dest in df.copies(final)}
        ep = df.exec_form(final, "ENTRYPOINT")
        if R.check(isinstance(ep, list) and ep, "%s: ENTRYPOINT must be in exec form (JSON)" % path):
            R.check(ep[0] in final_files, "%s: ENTRYPOINT %s is not installed by this Dockerfile" % (path, ep[0]))
            R.check(KILN_PATH in ep and ep[ep.index(KILN_PATH) + 1:ep.index(KILN_PATH) + 2] == [sub],
                    "%s: ENTRYPOINT must run %s %s" % (path, KILN_PATH, sub))
            if ep[0] != KILN_PATH:
                R.check(ep[0] == "/usr/local/bin/kiln-entrypoint" and
                        any(ENTRYPOINT_SCRIPT in srcs for frm, srcs, dest in df.copies(final) if dest == ep[0]),
                        "%s: ENTRYPOINT %s must be %s" % (path, ep[0], ENTRYPOINT_SCRIPT))
        uid = image_uid(df)
        R.check(isinstance(uid, int) and uid > 0, "%s: the runtime stage needs a numeric non-root USER, has %s" % (path, uid))
        R.check(df.lines(final, "HEALTHCHECK"), "%s: no HEALTHCHECK" % path)
        # packages
        bpk, rpk = set(df.apt_packages(build)), set(df.apt_packages(final))
        R.check(bpk <= deps, "%s: the build stage installs %s, which tools/deps.sh does not list"
                % (path, sorted(bpk - deps)))
        for l in libs:
            if LIB_DEV.get(l):
                R.check(LIB_DEV[l] in bpk, "%s: the build stage lacks %s (for -l%s)" % (path, LIB_DEV[l], l))
        distro = "ubuntu24.04" if "ubuntu24.04" in final["image"] else "debian12" if re.match(r"debian:12", final["image"]) else None
        if R.check(distro, "%s: runtime image %s is neither Ubuntu 24.04 nor Debian 12" % (path, final["image"])):
            table = LIB_RUNTIME[distro]
            want = {l for l in libs if LIB_DEV.get(l)}
            for so in sonames:
                if so not in SONAME_LIB:
                    R.fail("%s loads %s, which this checker cannot map to a package (SONAME_LIB)" % (kiln, so))
                elif SONAME_LIB[so]:
                    want.add(SONAME_LIB[so])
            for l in sorted(want):
                R.check(table[l] in rpk, "%s: the runtime stage lacks %s (for lib%s)" % (path, table[l], l))
            R.check("ca-certificates" in rpk, "%s: the runtime stage needs ca-certificates (https S3)" % path)
        dev = sorted(p for p in rpk if p.endswith("-dev") or p in ("build-essential", "gcc", "make"))
        R.check(not dev, "%s: the runtime stage installs build tools: %s" % (path, dev))
        env = df.env(final)
        if image == "kiln-worker":
            m_b = re.match(r"^nvidia/cuda:(.+)-devel-(ubuntu24\.04)$", build["image"])
            m_r = re.match(r"^nvidia/cuda:(.+)-runtime-(ubuntu24\.04)$", final["image"])
            R.check(m_b, "%s: build stage must be nvidia/cuda:VERSION-devel-ubuntu24.04, is %s" % (path, build["image"]))
            R.check(m_r, "%s: runtime stage must be nvidia/cuda:VERSION-runtime-ubuntu24.04, is %s" % (path, final["image"]))
            if m_b and m_r:
                R.check(m_b.group(1) == m_r.group(1), "%s: devel %s and runtime %s CUDA versions differ"
                        % (path, m_b.group(1), m_r.group(1)))
            hc = df.exec_form(final, "HEALTHCHECK")
            R.check(isinstance(hc, list) and KILN_PATH in hc and "--health" in hc,
                    "%s: HEALTHCHECK must run %s worker --health" % (path, KILN_PATH))
        else:
            R.check(final["image"] == "debian:12-slim", "%s: runtime must be debian:12-slim, is %s" % (path, final["image"]))
            R.check("cuda" not in build["image"].lower() and "cuda" not in final["image"].lower(),
                    "%s: the scheduler image must not be built on a CUDA image" % path)
            R.check(re.search(r"\bmake\b[^&;]*\bNVCC=(\s|$)", runs) or "nvcc" not in runs,
                    "%s: build without nvcc (make NVCC=)" % path)
            state = env.get("KILN_STATE_DIR")
            vols = " ".join(df.lines(final, "VOLUME"))
            R.check(state and state in vols, "%s: VOLUME must hold KILN_STATE_DIR %s" % (path, state))
            exposed = set(" ".join(df.lines(final, "EXPOSE")).replace("/tcp", "").split())
            for var in ("KILN_LISTEN", "KILN_HTTP"):
                port = (env.get(var) or "").rsplit(":", 1)[-1]
                R.check(port in exposed, "%s: EXPOSE lacks %s's port %s" % (path, var, port))
            hc = " ".join(df.lines(final, "HEALTHCHECK"))
            R.check("/healthz" in hc, "%s: HEALTHCHECK must GET /healthz" % path)
            R.check("curl" in rpk or "wget" in rpk or KILN_PATH in hc,
                    "%s: HEALTHCHECK needs curl or wget in the runtime stage" % path)
    print("ok: Dockerfiles and .dockerignore")


# --- every kiln command line in the deployment files, checked against the binary

def stub_dir():
    d = tempfile.mkdtemp(prefix="kiln-deploy-")
    stub = os.path.join(d, "kiln")
    with open(stub, "w") as f:
        f.write("#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done\n")
    os.chmod(stub, 0o755)
    secret = os.path.join(d, "secret")
    with open(secret, "w") as f:
        f.write("placeholder\n")
    return d, stub, secret


def run_argv(cmd, env, what):
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=20)
    if p.returncode != 0:
        R.fail("%s exited %d: %s" % (what, p.returncode, p.stderr.strip()))
        return None
    return p.stdout.splitlines()


def entrypoint_env(container, secret):
    """The environment a container would see, secrets and file paths made up."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    for e in container.get("env") or []:
        if "value" in e:
            env[e["name"]] = secret if e["name"].endswith("_FILE") else e["value"]
        elif "valueFrom" in e:
            env[e["name"]] = "placeholder"
    return env


def invocations(kiln_stub_dir, stub, secret):
    """(where, subcommand, [flags]) for every kiln command line the deployment runs."""
    out = []

    def add(where, argv):
        if not argv:
            return
        sub = argv[0]
        flags = [a.split("=", 1)[0] for a in argv[1:] if a.startswith("-")]
        out.append((where, sub, flags))

    # Each container as it would start: its image's ENTRYPOINT (docker/entrypoint.sh and
    # kiln, here the stub) with the image's ENV overridden by the container's env.
    sh = shutil.which("sh") or "/bin/sh"

    def local(cmd):
        cmd = [stub if a == KILN_PATH else rel(ENTRYPOINT_SCRIPT) if a.endswith("kiln-entrypoint") else a
               for a in cmd]
        return [sh] + cmd if cmd and cmd[0].endswith(".sh") else cmd

    for name in OVERLAYS:
        for o in rendered(name):
            for c in pod_containers(o):
                image = split_image(c.get("image", ""))[0].rsplit("/", 1)[-1]
                if image not in IMAGES or not os.path.exists(rel(IMAGES[image])):
                    continue
                df = Dockerfile(IMAGES[image])
                entry = df.exec_form(df.final, "ENTRYPOINT")
                env = dict(df.env(df.final), **entrypoint_env(c, secret))
                if isinstance(entry, list):
                    add("%s %s (image entrypoint, container env)" % (name, o["metadata"]["name"]),
                        run_argv(local(entry + (c.get("args") or [])), env,
                                 "%s %s's entrypoint" % (name, o["metadata"]["name"])))
                for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
                    cmd = ((c.get(probe) or {}).get("exec") or {}).get("command")
                    if cmd:
                        add("%s %s %s" % (name, o["metadata"]["name"], probe), run_argv(local(cmd), env, probe))
    full = {"PATH": os.environ.get("PATH", ""), "KILN_SCHEDULER": "tcp://sched:5555", "KILN_DEVICES": "all",
            "KILN_SLOTS": "4", "KILN_WORKER_THREADS": "4", "KILN_CURVE_SERVER_KEY_FILE": secret,
            "KILN_CURVE_SECRET_FILE": secret, "KILN_LISTEN": "tcp://0.0.0.0:5555", "KILN_HTTP": "0.0.0.0:8080", "KILN_STATE_DIR": "/var/lib/kiln",
            "KILN_TOKEN_FILE": secret}
    for sub in ("worker", "scheduler"):
        add("%s (every variable set)" % ENTRYPOINT_SCRIPT,
            run_argv([sh, rel(ENTRYPOINT_SCRIPT), stub, sub], full, ENTRYPOINT_SCRIPT))
    # Dockerfiles: ENTRYPOINT and exec-form HEALTHCHECK
    for image, path in IMAGES.items():
        df = Dockerfile(path)
        for instr in ("ENTRYPOINT", "HEALTHCHECK"):
            arr = df.exec_form(df.final, instr)
            if isinstance(arr, list) and KILN_PATH in arr:
                add("%s %s" % (path, instr), arr[arr.index(KILN_PATH) + 1:])
    # Slurm: the script execs $KILN_BIN; a stub prints what it would run
    env = dict(full, KILN_BIN=stub)
    add("deploy/slurm/kiln-workers.sbatch",
        run_argv(["bash", rel("deploy/slurm/kiln-workers.sbatch")], env, "kiln-workers.sbatch"))
    # systemd: ExecStart lines with the unit's variables expanded
    for unit in systemd_units():
        u = parse_unit(rel("deploy/systemd", unit))
        for key in ("ExecStartPre", "ExecStart", "ExecStartPost", "ExecReload", "ExecStop"):
            for line in u.get(("Service", key), []):
                argv = unit_argv(line, u, secret)
                if argv and argv[0] == KILN_PATH:
                    add("deploy/systemd/%s %s" % (unit, key), argv[1:])
    # docs: kiln command lines in code blocks of docs/OPERATIONS.md
    if os.path.exists(rel("docs/OPERATIONS.md")):
        inblock = False
        for line in read("docs/OPERATIONS.md").splitlines():
            if line.strip().startswith("```"):
                inblock = not inblock
                continue
            s = re.sub(r"^\s*\$\s*", "", line.strip())
            if (inblock or line.startswith("    ")) and re.match(r"^kiln [a-z]", s):
                try:
                    argv = shlex.split(s.split("#")[0])
                except ValueError:
                    continue
                add("docs/OPERATIONS.md: %s" % s, argv[1:])
    return out


def check_commands(kiln):
    d, stub, secret = stub_dir()
    try:
        calls = invocations(d, stub, secret)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    R.check(calls, "found no kiln command line in the deployment files")
    if not (kiln and os.access(kiln, os.X_OK)):
        R.fail("%s is not an executable kiln binary (set KILN_BIN)" % kiln)
        return
    helps = {}
    for where, sub, flags in calls:
        if sub not in helps:
            p = subprocess.run([kiln, sub, "--help"], capture_output=True, text=True, timeout=20)
            helps[sub] = p.stdout if p.returncode == 0 else None
            if helps[sub] is None:
                R.fail("`%s %s --help` exits %d (%s): the deployment runs `kiln %s`, which this build lacks"
                       % (kiln, sub, p.returncode, p.stderr.strip(), sub))
        if helps[sub] is None:
            continue
        for f in flags:
            if f in ("-h", "--help"):
                continue
            R.check(re.search(r"(^|[\s\[,|(])" + re.escape(f) + r"(?![\w-])", helps[sub], re.M),
                    "%s: `kiln %s %s` is not in `kiln %s --help`" % (where, sub, f, sub))
    subs = sorted({c[1] for c in calls})
    print("ok: checked %d kiln command lines (%s) against %s" % (len(calls), ", ".join(subs), kiln))


def check_slurm():
    path = "deploy/slurm/kiln-workers.sbatch"
    if not R.check(os.path.exists(rel(path)), path + " is missing"):
        return
    text = read(path)
    p = subprocess.run(["bash", "-n", rel(path)], capture_output=True, text=True)
    R.check(p.returncode == 0, "%s: bash -n: %s" % (path, p.stderr.strip()))
    sb = dict((m.group(1), m.group(2)) for m in re.finditer(r"^#SBATCH\s+--([\w-]+)(?:=(\S+))?", text, re.M))
    R.check(sb.get("gres") == "gpu:1", "%s: one GPU per task: #SBATCH --gres=gpu:1" % path)
    R.check("array" in sb, "%s: the workers are an array job: #SBATCH --array" % path)
    R.check(re.match(r"^(B:)?TERM@\d+$", sb.get("signal", "")) and int(sb["signal"].split("@")[1]) > WORKER_DRAIN_S,
            "%s: #SBATCH --signal=B:TERM@N with N > %d s, so the worker drains before the time limit" % (path, WORKER_DRAIN_S))
    R.check(re.search(r"^\s*exec\s", text, re.M), "%s: exec the worker, so it gets the batch shell's SIGTERM" % path)
    # refuses to start without a scheduler address, with a message naming the variable
    env = {"PATH": os.environ.get("PATH", ""), "KILN_BIN": "/bin/false"}
    p = subprocess.run(["bash", rel(path)], env=env, capture_output=True, text=True, timeout=20)
    R.check(p.returncode == 2 and "KILN_SCHEDULER" in p.stderr,
            "%s without KILN_SCHEDULER must exit 2 naming it; got %d: %s" % (path, p.returncode, p.stderr.strip()))
    # each task's worker gets the task's CPUs as its threads (kiln's default, every core of
    # the node for a task not bound to CPUs, would oversubscribe a node shared by tasks);
    # KILN_WORKER_THREADS wins
    d, stub, _ = stub_dir()
    try:
        base = {"PATH": os.environ.get("PATH", ""), "KILN_SCHEDULER": "tcp://sched:5555", "KILN_BIN": stub}
        for extra, want in (({"SLURM_CPUS_PER_TASK": "6"}, "6"),
                            ({"SLURM_CPUS_PER_TASK": "6", "KILN_WORKER_THREADS": "3"}, "3"), ({}, None)):
            argv = run_argv(["bash", rel(path)], dict(base, **extra), "%s with %s" % (path, extra)) or []
            got = argv[argv.index("--threads") + 1] if "--threads" in argv[:-1] else None
            R.check(got == want, "%s with %s: --threads %s, expected %s" % (path, extra, got, want))
    finally:
        shutil.rmtree(d, ignore_errors=True)
    if shutil.which("shellcheck"):
        for f in (path, ENTRYPOINT_SCRIPT):
            p = subprocess.run(["shellcheck", "-S", "warning", rel(f)], capture_output=True, text=True)
            R.check(p.returncode == 0, "shellcheck %s:\n%s" % (f, p.stdout.strip()))
    else:
        R.note("shellcheck not installed: skipped")
    print("ok: Slurm script")


def systemd_units():
    d = rel("deploy/systemd")
    return sorted(f for f in os.listdir(d) if f.endswith(".service")) if os.path.isdir(d) else []


def parse_unit(path):
    """{(section, key): [values...]} keeping repeated keys, continuation lines joined."""
    out, section, cur = {}, None, ""
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    for line in lines:
        s = line.strip()
        if not cur and (not s or s[0] in "#;"):
            continue
        if s.endswith("\\"):
            cur += s[:-1] + " "
            continue
        s, cur = cur + s, ""
        if s.startswith("[") and s.endswith("]"):
            section = s[1:-1]
            out.setdefault(("__sections__", None), []).append(section)
            continue
        k, _, v = s.partition("=")
        out.setdefault((section, k.strip()), []).append(v.strip())
    return out


def unit_env(u):
    env = {}
    for v in u.get(("Service", "Environment"), []):
        for tok in shlex.split(v):
            k, _, val = tok.partition("=")
            env[k] = val
    return env


def unit_argv(line, u, secret):
    env = {"KILN_SCHEDULER": "tcp://sched:5555", "CREDENTIALS_DIRECTORY": "/run/credentials/x",
           "STATE_DIRECTORY": "/var/lib/kiln"}
    env.update(unit_env(u))
    line = line.lstrip("-@:+!")
    line = line.replace("%i", "0").replace("%I", "0")
    words = []
    for w in shlex.split(line):
        m = re.match(r"^\$(\w+)$", w)
        if m:  # $VAR: split into words; unset or empty -> nothing
            words += (env.get(m.group(1)) or "").split()
        else:
            words.append(re.sub(r"\$\{(\w+)\}", lambda mm: env.get(mm.group(1), ""), w))
    return words


def check_systemd(kiln):
    units = systemd_units()
    R.check("kiln-scheduler.service" in units and "kiln-worker@.service" in units,
            "deploy/systemd needs kiln-scheduler.service and kiln-worker@.service, has %s" % units)
    hardening = {"NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes",
                 "ProtectKernelTunables": "yes", "ProtectKernelModules": "yes", "ProtectControlGroups": "yes",
                 "RestrictSUIDSGID": "yes", "LockPersonality": "yes", "CapabilityBoundingSet": ""}
    for unit in units:
        path = "deploy/systemd/" + unit
        u = parse_unit(rel(path))
        one = lambda k, sec="Service": (u.get((sec, k)) or [None])[-1]
        secs = u.get(("__sections__", None), [])
        for sec in ("Unit", "Service", "Install"):
            R.check(sec in secs, "%s: no [%s] section" % (path, sec))
        R.check(one("Restart") == "on-failure", "%s: Restart=on-failure" % path)
        R.check(u.get(("Service", "EnvironmentFile")), "%s: configuration through EnvironmentFile=" % path)
        for k, v in hardening.items():
            R.check(one(k) == v, "%s: hardening %s=%s missing (has %r)" % (path, k, v, one(k)))
        R.check(one("DynamicUser") == "yes" or (one("User") not in (None, "root", "0")),
                "%s: must not run as root (DynamicUser=yes or User=)" % path)
        R.check(one("KillSignal") in (None, "SIGTERM", "TERM"), "%s: stop with SIGTERM" % path)
        execs = u.get(("Service", "ExecStart"), [])
        R.check(len(execs) == 1, "%s: one ExecStart" % path)
        argv = unit_argv(execs[0], u, "x") if execs else []
        R.check(argv[:1] == [KILN_PATH], "%s: ExecStart must run %s (where the install puts build/kiln)" % (path, KILN_PATH))
        if unit.startswith("kiln-worker@"):
            R.check("%i" in execs[0] and "--devices" in argv, "%s: the instance (%%i) must be --devices" % path)
            # a device allow-list hides /dev/nvidia* from the worker
            for k, bad in (("PrivateDevices", "yes"), ("ProtectClock", "yes"), ("DevicePolicy", "closed"),
                           ("DevicePolicy", "strict")):
                R.check(one(k) != bad or any("nvidia" in v for v in u.get(("Service", "DeviceAllow"), [])),
                        "%s: %s=%s restricts /dev and hides the GPUs" % (path, k, bad))
            stop = one("TimeoutStopSec")
            R.check(stop and stop.rstrip("s").isdigit() and int(stop.rstrip("s")) > WORKER_DRAIN_S,
                    "%s: TimeoutStopSec must exceed the worker's %d s drain" % (path, WORKER_DRAIN_S))
        if unit == "kiln-scheduler.service":
            sd = one("StateDirectory")
            R.check(sd and "--state-dir" in argv and argv[argv.index("--state-dir") + 1] in ("/var/lib/" + sd, "${STATE_DIRECTORY}"),
                    "%s: --state-dir must be the StateDirectory= (/var/lib/%s)" % (path, sd))
    verify = shutil.which("systemd-analyze")
    if not verify:
        R.note("systemd-analyze not installed: unit files checked by this script only")
    elif not (kiln and os.access(kiln, os.X_OK)):
        R.fail("%s is not executable: systemd-analyze verify needs it" % kiln)
    else:
        d = tempfile.mkdtemp(prefix="kiln-units-")
        try:
            names = []
            for unit in units:
                text = read("deploy/systemd/" + unit).replace(KILN_PATH, os.path.abspath(kiln))
                with open(os.path.join(d, unit), "w") as f:
                    f.write(text)
                names.append(os.path.join(d, unit.replace("@.", "@0.")))
            p = subprocess.run([verify, "verify", "--man=no"] + names, capture_output=True, text=True,
                               timeout=60, cwd=d)
            msgs = [l for l in (p.stdout + p.stderr).splitlines() if "kiln" in l]
            R.check(p.returncode == 0 and not msgs, "systemd-analyze verify (rc %d):\n%s"
                    % (p.returncode, "\n".join(msgs)))
        finally:
            shutil.rmtree(d, ignore_errors=True)
    print("ok: systemd units")


def check_docs():
    path = "docs/OPERATIONS.md"
    if not R.check(os.path.exists(rel(path)), path + " is missing"):
        return
    text = read(path)
    heads = [h.lower() for h in re.findall(r"^#+\s+(.*)$", text, re.M)]
    for topic in ("sizing", "scaling", "upgrad", "metrics", "failure"):
        R.check(any(topic in h for h in heads), "%s: no section on %s" % (path, topic))
    variables = set(re.findall(r"\b(KILN_[A-Z_]+)", read(ENTRYPOINT_SCRIPT)))
    variables |= set(re.findall(r"\b(KILN_[A-Z_]+)", read("deploy/slurm/kiln-workers.sbatch")))
    for unit in systemd_units():
        variables |= set(re.findall(r"\b(KILN_[A-Z_]+)", read("deploy/systemd/" + unit)))
    for v in sorted(variables):
        R.check(v in text, "%s does not document %s" % (path, v))
    for f in ("deploy/kubernetes/overlays/dev", "deploy/kubernetes/overlays/prod", "deploy/slurm/kiln-workers.sbatch",
              "deploy/systemd", "docker/Dockerfile.worker", "docker/Dockerfile.scheduler"):
        R.check(f in text, "%s does not point to %s" % (path, f))
    R.check(re.findall(r"\bkiln_[a-z_]+", text), "%s names no metric" % path)
    print("ok: %s" % path)


CHECKS = ["yaml", "kustomize", "workloads", "secrets", "prometheus", "docker", "commands", "slurm", "systemd", "docs"]


def main():
    global ROOT
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=".")
    ap.add_argument("--kiln", default=os.environ.get("KILN_BIN", "build/kiln"))
    ap.add_argument("checks", nargs="+", choices=CHECKS + ["all"])
    a = ap.parse_args()
    ROOT = a.root
    kiln = a.kiln if os.path.isabs(a.kiln) else os.path.join(ROOT, a.kiln) if ROOT != "." else a.kiln
    for c in (CHECKS if "all" in a.checks else a.checks):
        fn = globals()["check_" + c]
        try:
            if c in ("docker", "commands", "systemd"):
                fn(kiln)
            else:
                fn()
        except Exception as e:  # a crash in a check is a failure, with its cause
            import traceback
            R.fail("check %s crashed: %s\n%s" % (c, e, traceback.format_exc()))
    print("%d problem%s" % (R.failures, "" if R.failures == 1 else "s"))
    sys.exit(1 if R.failures else 0)


if __name__ == "__main__":
    main()
