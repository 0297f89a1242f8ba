// Package packaging holds what installs rnicd as a service: the systemd
// unit (systemd/rnicd@.service), the man pages (man/), bash and zsh
// completion (completion/), the Debian package's build (deb.sh) and a
// container image definition (container/Dockerfile). It has no Go code;
// its tests build the package, install it into a directory and run the
// installed daemon from the unit's ExecStart line in a network namespace.
package packaging
