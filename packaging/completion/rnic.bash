# bash completion for rnic(8). Commands are read from `rnic`'s usage and a
# command's flags from `rnic COMMAND -h` when completing, so they follow
# the binary; -d completes the devices `rnic ibv_devices` lists.

_rnic_commands() {
	"$1" 2>&1 | sed -nE 's/^  ([a-z][a-z0-9_]*) .*/\1/p'
}

# The spellings perftest prints ("-d, --ib-dev=<dev>", "    --output=<units>")
# and Go's flag package prints ("  -d dev").
_rnic_flags() {
	"$1" "$2" -h 2>&1 | sed -nE -e 's/^ +(--[A-Za-z0-9_-]+).*/\1/p' -e 's/^ +(-[A-Za-z0-9_]+)(, (--[A-Za-z0-9_-]+))?.*/\1 \3/p'
}

_rnic() {
	local cur prev cmd
	cur=${COMP_WORDS[COMP_CWORD]}
	prev=${COMP_WORDS[COMP_CWORD-1]}
	if [ "$COMP_CWORD" -eq 1 ]; then
		COMPREPLY=($(compgen -W "$(_rnic_commands "${COMP_WORDS[0]}")" -- "$cur"))
		return
	fi
	cmd=${COMP_WORDS[1]}
	case $prev in
	-d | --ib-dev | -ib-dev)
		COMPREPLY=($(compgen -W "$("${COMP_WORDS[0]}" ibv_devices 2>/dev/null | awk 'NR > 2 { print $1 }')" -- "$cur"))
		return
		;;
	esac
	case $cur in
	-*) COMPREPLY=($(compgen -W "$(_rnic_flags "${COMP_WORDS[0]}" "$cmd")" -- "$cur")) ;;
	*)
		case $cmd in
		res) COMPREPLY=($(compgen -W 'show qp cm_id' -- "$cur")) ;;
		inject) COMPREPLY=($(compgen -W 'drop dropnth dup reorder delay corrupt link queue ecn mark off' -- "$cur")) ;;
		*) COMPREPLY=($(compgen -A hostname -- "$cur")) ;;
		esac
		;;
	esac
}
complete -F _rnic rnic
