"""The Pod Security Standards' "restricted" profile, checked over a parsed pod spec.

Kubernetes' Pod Security admission enforces these rules on a namespace
labelled ``pod-security.kubernetes.io/enforce: restricted``; a manifest that
breaks one is refused there, so the examples in deploy/kubernetes are held to
them offline. The rules are those of the "baseline" profile and the
"restricted" additions (kubernetes.io/docs/concepts/security/pod-security-standards),
for Linux pods; ``restricted_problems`` returns one line per broken rule, so
that a failing test says what to fix.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

# Restricted: the only volume types a pod may use.
_VOLUME_TYPES = frozenset({"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                           "persistentVolumeClaim", "projected", "secret"})
_VOLUME_KEYS = frozenset({"name"})
# Baseline: sysctls that are namespaced and safe.
_SAFE_SYSCTLS = frozenset({
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes"})
_SECCOMP_TYPES = frozenset({"RuntimeDefault", "Localhost"})
_SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t",
                            "container_engine_t"})


def containers(pod: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    """Every container of the pod: init, regular and ephemeral."""
    for key in ("initContainers", "containers", "ephemeralContainers"):
        yield from pod.get(key) or []


def restricted_problems(pod: Mapping[str, Any]) -> list[str]:
    """What in this pod spec (a template's ``spec``) breaks the "restricted" profile."""
    problems: list[str] = []
    pod_context: Mapping[str, Any] = pod.get("securityContext") or {}
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(key):
            problems.append(f"pod: {key} must be false")
    problems += [f"pod: {p}" for p in _context_problems(pod_context)]
    for sysctl in pod_context.get("sysctls") or []:
        if sysctl.get("name") not in _SAFE_SYSCTLS:
            problems.append(f"pod: sysctl {sysctl.get('name')} is not in the safe set")
    for volume in pod.get("volumes") or []:
        kinds = set(volume) - _VOLUME_KEYS
        if not kinds <= _VOLUME_TYPES:
            problems.append(f"volume {volume.get('name')}: type {sorted(kinds)} is not allowed")
    pod_non_root = pod_context.get("runAsNonRoot") is True
    pod_seccomp = (pod_context.get("seccompProfile") or {}).get("type")
    for container in containers(pod):
        context: Mapping[str, Any] = container.get("securityContext") or {}
        name = f"container {container.get('name')}"
        problems += [f"{name}: {p}" for p in _context_problems(context)]
        if context.get("privileged"):
            problems.append(f"{name}: privileged must be false")
        if context.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{name}: allowPrivilegeEscalation must be false")
        non_root = context.get("runAsNonRoot", pod_non_root)
        if non_root is not True:
            problems.append(f"{name}: runAsNonRoot must be true (in the pod or the container)")
        seccomp = (context.get("seccompProfile") or {}).get("type", pod_seccomp)
        if seccomp not in _SECCOMP_TYPES:
            problems.append(f"{name}: seccompProfile must be RuntimeDefault or Localhost "
                            "(in the pod or the container)")
        capabilities: Mapping[str, Any] = context.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []):
            problems.append(f"{name}: capabilities must drop ALL")
        added = set(capabilities.get("add") or []) - {"NET_BIND_SERVICE"}
        if added:
            problems.append(f"{name}: capabilities may add only NET_BIND_SERVICE, not "
                            f"{sorted(added)}")
        if context.get("procMount", "Default") != "Default":
            problems.append(f"{name}: procMount must be Default")
        for port in container.get("ports") or []:
            if port.get("hostPort"):
                problems.append(f"{name}: hostPort must not be set")
    return problems


def _context_problems(context: Mapping[str, Any]) -> list[str]:
    """Rules a pod's and a container's securityContext share."""
    problems: list[str] = []
    if context.get("runAsUser") == 0:
        problems.append("runAsUser must not be 0")
    seccomp = (context.get("seccompProfile") or {}).get("type")
    if seccomp is not None and seccomp not in _SECCOMP_TYPES:
        problems.append(f"seccompProfile {seccomp} is not allowed")
    apparmor = (context.get("appArmorProfile") or {}).get("type")
    if apparmor is not None and apparmor not in _SECCOMP_TYPES:
        problems.append(f"appArmorProfile {apparmor} is not allowed")
    selinux: Mapping[str, Any] = context.get("seLinuxOptions") or {}
    if selinux.get("type", "") not in _SELINUX_TYPES:
        problems.append(f"seLinuxOptions type {selinux.get('type')} is not allowed")
    if selinux.get("user") or selinux.get("role"):
        problems.append("seLinuxOptions user and role must not be set")
    if (context.get("windowsOptions") or {}).get("hostProcess"):
        problems.append("windowsOptions.hostProcess must not be true")
    return problems
