#!/usr/bin/env bash
# Debian libraries that Python wheels need at import time: open3d links libusb, and its offscreen
# renderer (point-cloud thumbnails) needs a Vulkan loader with Mesa's software driver.
set -euo pipefail
packages=(libusb-1.0-0 libvulkan1 mesa-vulkan-drivers)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}"
fi
