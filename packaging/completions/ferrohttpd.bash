# bash completion for ferrohttpd(8), and for the binary run as thttpd.
# Installed as /usr/share/bash-completion/completions/ferrohttpd; or source it from ~/.bashrc.
# Written by hand (the command line has no generator); tests/docs.rs checks that every flag of
# `ferrohttpd --help` is offered here.

_ferrohttpd() {
    local cur=${COMP_WORDS[COMP_CWORD]}
    local prev=
    ((COMP_CWORD > 0)) && prev=${COMP_WORDS[COMP_CWORD - 1]}
    local cmd=${COMP_WORDS[0]##*/}
    COMPREPLY=()

    # ferrohttpd compress DIR [--min-size N] [--encodings br,zstd,gzip] [-v]
    if [[ $cmd != thttpd && ${COMP_WORDS[1]:-} == compress ]] && ((COMP_CWORD > 1)); then
        case $prev in
        --min-size)
            return
            ;;
        --encodings)
            mapfile -t COMPREPLY < <(compgen -W "br,zstd,gzip br zstd gzip br,gzip zstd,gzip" -- "$cur")
            return
            ;;
        esac
        if [[ $cur == -* ]]; then
            mapfile -t COMPREPLY < <(compgen -W "--min-size --encodings -v --verbose --help" -- "$cur")
        else
            compopt -o filenames 2>/dev/null
            mapfile -t COMPREPLY < <(compgen -d -- "$cur")
        fi
        return
    fi

    case $prev in
    --root)
        [[ $cmd == thttpd ]] && return
        compopt -o filenames 2>/dev/null
        mapfile -t COMPREPLY < <(compgen -d -- "$cur")
        return
        ;;
    --port | --listen | --domain | --email)
        return
        ;;
    --config)
        compopt -o filenames 2>/dev/null
        mapfile -t COMPREPLY < <(compgen -f -X '!*.toml' -- "$cur"; compgen -d -- "$cur")
        return
        ;;
    -C | -t | -l | -i)
        compopt -o filenames 2>/dev/null
        mapfile -t COMPREPLY < <(compgen -f -- "$cur")
        return
        ;;
    -d | -dd)
        compopt -o filenames 2>/dev/null
        mapfile -t COMPREPLY < <(compgen -d -- "$cur")
        return
        ;;
    -u)
        mapfile -t COMPREPLY < <(compgen -u -- "$cur")
        return
        ;;
    -h)
        mapfile -t COMPREPLY < <(compgen -A hostname -- "$cur")
        return
        ;;
    -T)
        mapfile -t COMPREPLY < <(compgen -W "utf-8 iso-8859-1" -- "$cur")
        return
        ;;
    -p | -P | -M | -c)
        return
        ;;
    esac

    local flags="-C -p -d -r -nor -dd -s -nos -v -nov -g -nog -u -c -t -h -l -i -T -P -M -V -D"
    local long="--config --check-config --help --version"
    local ours="--port --listen --root --domain --email"
    if [[ $cmd == thttpd ]]; then
        mapfile -t COMPREPLY < <(compgen -W "$flags $long" -- "$cur")
    elif [[ $cur != -* ]]; then
        # The directory to serve (and, first, the subcommand).
        compopt -o filenames 2>/dev/null
        ((COMP_CWORD == 1)) && mapfile -t COMPREPLY < <(compgen -W "compress" -- "$cur")
        mapfile -t -O "${#COMPREPLY[@]}" COMPREPLY < <(compgen -d -- "$cur")
    else
        mapfile -t COMPREPLY < <(compgen -W "$ours $long $flags" -- "$cur")
    fi
}

complete -F _ferrohttpd ferrohttpd thttpd
