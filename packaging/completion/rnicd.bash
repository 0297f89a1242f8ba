# bash completion for rnicd(8). The flags are read from `rnicd -h` when
# completing, so they are never out of date with the binary.

_rnicd_flags() {
	"$1" -h 2>&1 | sed -nE 's/^  (-[A-Za-z0-9_-]+).*/\1/p'
}

_rnicd() {
	local cur prev
	cur=${COMP_WORDS[COMP_CWORD]}
	prev=${COMP_WORDS[COMP_CWORD-1]}
	case $prev in
	-mode) COMPREPLY=($(compgen -W 'udp packet' -- "$cur")); return ;;
	-pcap-format) COMPREPLY=($(compgen -W 'pcap pcapng' -- "$cur")); return ;;
	-cc) COMPREPLY=($(compgen -W 'dcqcn none' -- "$cur")); return ;;
	-retry7) COMPREPLY=($(compgen -W 'seven forever' -- "$cur")); return ;;
	-log-format) COMPREPLY=($(compgen -W 'text json' -- "$cur")); return ;;
	-log-level) COMPREPLY=($(compgen -W 'debug info warn error' -- "$cur")); return ;;
	-mtu) COMPREPLY=($(compgen -W '256 512 1024 2048 4096' -- "$cur")); return ;;
	-group) COMPREPLY=($(compgen -g -- "$cur")); return ;;
	-trace | -pcap | -cc-config | -cpuprofile) COMPREPLY=($(compgen -f -- "$cur")); return ;;
	esac
	COMPREPLY=($(compgen -W "$(_rnicd_flags "${COMP_WORDS[0]}")" -- "$cur"))
}
complete -F _rnicd rnicd
