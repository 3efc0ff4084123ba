#!/bin/bash
# HyperPod (EKS-orchestrated) lifecycle script: SageMaker runs it once, as root, on every new node
# of an instance group (LifeCycleConfig.OnCreate), before the node joins the EKS cluster.
#
# What it does: moves containerd's data root (/var/lib/containerd: image layers and container
# writable layers, tens of GB for an inference image) off the small root volume onto the fastest
# local disk there is:
#   1. /opt/dlami/nvme  instance-store NVMe, mounted by the HyperPod AMI on instance types that
#                       have instance store (also where the inference operator caches weights);
#   2. /opt/sagemaker   the secondary EBS volume from InstanceStorageConfigs.
# If neither is mounted, nothing changes. The move is a bind mount recorded in /etc/fstab, so it
# survives reboots and does not replace the AMI's containerd configuration (which differs between
# AL2 and AL2023 and changes with AMI releases).
#
# It also keeps pods away from the instance metadata service (169.254.169.254), which hands out the
# credentials of the instance group's execution role to whoever asks: HyperPod's CreateCluster takes no
# metadata options (no IMDSv2 requirement, no hop limit to set), so the node drops what pods send there
# (see block_pod_metadata_access), as the EKS documentation suggests for nodes whose metadata options
# are not set.
#
# Output goes to /var/log/provision/on_create.log; HyperPod uploads lifecycle logs to CloudWatch
# Logs under /aws/sagemaker/Clusters/<cluster-name>/<cluster-id>. Sourced instead of run (the tests),
# it only defines its functions.
set -euo pipefail
set -o errtrace # the ERR trap below also fires inside functions

readonly NVME_MOUNT=/opt/dlami/nvme
readonly EBS_MOUNT=/opt/sagemaker
readonly CONTAINERD_ROOT=/var/lib/containerd
# The NVMe volume is assembled during boot; give it time on large (8-disk) instances.
readonly NVME_WAIT_SECONDS=180
# The instance metadata service, and the host side of pods' network interfaces on the VPC CNI (veth pairs
# named eni<hash>: AWS_VPC_K8S_CNI_VETHPREFIX's default).
readonly IMDS_IPV4=169.254.169.254/32
readonly IMDS_IPV6=fd00:ec2::254/128
readonly POD_INTERFACES=eni+
readonly IMDS_BLOCK_UNIT=block-pod-imds.service
# Where things are written (plain variables: the tests point them at a scratch folder).
LOG_FILE=/var/log/provision/on_create.log
SYSTEMD_UNIT_DIR=/etc/systemd/system
HELPER_DIR=/usr/local/sbin

log() { echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) on_create: $*" >&2; }

has_instance_store() {
  grep -qs "Amazon EC2 NVMe Instance Storage" /sys/class/nvme/nvme*/model
}

wait_for_mount() { # <mount point> <seconds>
  local deadline=$((SECONDS + $2))
  until mountpoint -q "$1"; do
    if ((SECONDS >= deadline)); then
      return 1
    fi
    sleep 5
  done
}

# Prints the mount point to use, or nothing.
fastest_disk() {
  if has_instance_store; then
    log "instance-store NVMe present; waiting up to ${NVME_WAIT_SECONDS}s for $NVME_MOUNT"
    if wait_for_mount "$NVME_MOUNT" "$NVME_WAIT_SECONDS"; then
      echo "$NVME_MOUNT"
      return
    fi
    log "$NVME_MOUNT was not mounted in time; falling back to EBS"
  fi
  if mountpoint -q "$EBS_MOUNT"; then
    echo "$EBS_MOUNT"
  fi
}

move_containerd_root() { # <disk mount point>
  local disk=$1
  local target="$disk/containerd"
  if mountpoint -q "$CONTAINERD_ROOT" || grep -qs " $CONTAINERD_ROOT " /etc/fstab; then
    log "$CONTAINERD_ROOT is already redirected; nothing to do"
    return
  fi
  local was_active=false
  if systemctl is-active --quiet containerd; then
    was_active=true
    systemctl stop containerd
  fi
  mkdir -p "$target" "$CONTAINERD_ROOT"
  # Keep what the AMI pre-loaded (for example the pause image) so nothing has to be pulled again.
  cp -a "$CONTAINERD_ROOT/." "$target/"
  echo "$target $CONTAINERD_ROOT none bind,x-systemd.requires-mounts-for=$disk 0 0" >>/etc/fstab
  systemctl daemon-reload
  mount "$CONTAINERD_ROOT"
  if $was_active; then
    systemctl start containerd
  fi
  log "containerd data root is now $target ($(df -h --output=avail "$disk" | tail -n 1 | tr -d ' ') free)"
}

# Pods that use the pod network (not hostNetwork) may not reach the instance metadata service: a helper
# inserts, first in FORWARD, a DROP of what pod interfaces send to it (IPv4, and IPv6 where the node has it),
# and a systemd unit runs the helper at every boot, before the kubelet starts pods. The pods' own roles (IRSA,
# Pod Identity) are unaffected: they do not come from the metadata service. Idempotent.
block_pod_metadata_access() {
  local helper="$HELPER_DIR/block-pod-imds"
  mkdir -p "$HELPER_DIR" "$SYSTEMD_UNIT_DIR"
  cat >"$helper" <<HELPER
#!/bin/bash
# Written by the HyperPod lifecycle script (hyperpod-inference-iac); run by $IMDS_BLOCK_UNIT at boot.
set -euo pipefail
drop() { # <iptables|ip6tables> <metadata address>
  "\$1" -w -C FORWARD -i $POD_INTERFACES -d "\$2" -j DROP 2>/dev/null \\
    || "\$1" -w -I FORWARD 1 -i $POD_INTERFACES -d "\$2" -j DROP
}
drop iptables $IMDS_IPV4
if [[ -e /proc/net/if_inet6 ]] && command -v ip6tables >/dev/null; then
  drop ip6tables $IMDS_IPV6
fi
HELPER
  chmod 0755 "$helper"
  cat >"$SYSTEMD_UNIT_DIR/$IMDS_BLOCK_UNIT" <<UNIT
[Unit]
Description=Keep pods away from the instance metadata service (hyperpod-inference-iac)
After=iptables.service ip6tables.service nftables.service
Before=kubelet.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=$helper

[Install]
WantedBy=multi-user.target
UNIT
  systemctl daemon-reload
  systemctl enable --now "$IMDS_BLOCK_UNIT"
  log "pods can no longer reach the instance metadata service ($IMDS_BLOCK_UNIT runs $helper at every boot)"
}

main() {
  mkdir -p "$(dirname "$LOG_FILE")"
  exec > >(tee -a "$LOG_FILE") 2>&1
  # On failure, wait a minute so the log reaches CloudWatch before SageMaker replaces the node.
  trap 'log "failed at line $LINENO (exit $?)"; sync; sleep 60' ERR
  log "start on $(hostname) ($(. /etc/os-release && echo "$PRETTY_NAME"))"
  block_pod_metadata_access
  local disk
  disk=$(fastest_disk)
  if [[ -z "$disk" ]]; then
    log "neither $NVME_MOUNT nor $EBS_MOUNT is mounted; containerd stays on the root volume"
  else
    move_containerd_root "$disk"
  fi
  log "done"
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  main "$@"
fi
