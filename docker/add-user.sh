#!/bin/sh
# The image's user: `ega` with uid 1000 (the first user of most hosts, so that its files on a bind mount are
# theirs). A base that already has a user with uid 1000 (Ubuntu 24.04's `ubuntu`, and so the nvidia/cuda
# images on it) gets that user renamed to `ega` (its group too, when named after it): `useradd --uid 1000`
# would stop there with "UID 1000 is not unique".
set -eu
uid=1000
existing=$(getent passwd "$uid" | cut -d: -f1 || true)
if [ -z "$existing" ]; then
    useradd --create-home --uid "$uid" --user-group --shell /bin/bash ega
elif [ "$existing" != ega ]; then
    group=$(id -gn "$existing")
    usermod --login ega --home /home/ega --move-home "$existing"
    if [ "$group" = "$existing" ]; then
        groupmod --new-name ega "$group"
    fi
fi
echo "user: $(id ega)"
