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
# Output goes to /var/log/provision/on_create.log; HyperPod uploads lifecycle logs to CloudWatch
# Logs under /aws/sagemaker/Clusters/<cluster-name>/<cluster-id>.
set -euo pipefail
set -o errtrace # the ERR trap below also fires inside functions

readonly LOG_FILE=/var/log/provision/on_create.log
readonly NVME_MOUNT=/opt/dlami/nvme
readonly EBS_MOUNT=/opt/sagemaker
readonly CONTAINERD_ROOT=/var/lib/containerd
# The NVMe volume is assembled during boot; give it time on large (8-disk) instances.
readonly NVME_WAIT_SECONDS=180

mkdir -p "$(dirname "$LOG_FILE")"
exec > >(tee -a "$LOG_FILE") 2>&1

log() { echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) on_create: $*" >&2; }

# On failure, wait a minute so the log reaches CloudWatch before SageMaker replaces the node.
trap 'log "failed at line $LINENO (exit $?)"; sync; sleep 60' ERR

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

main() {
  log "start on $(hostname) ($(. /etc/os-release && echo "$PRETTY_NAME"))"
  local disk
  disk=$(fastest_disk)
  if [[ -z "$disk" ]]; then
    log "neither $NVME_MOUNT nor $EBS_MOUNT is mounted; containerd stays on the root volume"
  else
    move_containerd_root "$disk"
  fi
  log "done"
}

main "$@"
