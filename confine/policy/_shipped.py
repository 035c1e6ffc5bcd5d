"""The built-in profiles, parsed: each file's text and what policy/load.py's
parser makes of it. Generated from profiles/*.yaml by scripts/gen-artefacts.sh
(policy/ship.py): do not edit. The loader takes an entry only for a file in the
built-in directory that holds exactly its text; any other file is parsed from
its YAML. tests/unit/test_shipped.py checks each entry against the parser."""
# ruff: noqa: E501
from __future__ import annotations

from collections.abc import Callable
from typing import Any


def parsed(name: str, text: str, item: Callable[[object, str], Any]) -> dict[str, Any] | None:
    """The parsed profile `name`, made afresh with `item` (load.Item), if `text` is the
    text it was made from."""
    if TEXT.get(name) != text:
        return None
    return BUILD[name](item)


TEXT: dict[str, str] = {
    'claude-code': '# claude-code: the default profile plus what Claude Code itself needs.\n# Network: only the hosts below, on 443, through confine\'s gateway (DNS\n# included); nothing else, whatever the port. --allow-host or network.include\n# adds more (e.g. `include: [registries]` for npm and PyPI).\n# ~/.claude is a state root (docs/profiles.md "Agent state"): Claude Code may make any\n# name in it (each release adds some), while the names below, which Claude Code runs or\n# obeys later as you, stay protected like the workdir\'s .git/hooks: the name guard\n# refuses them at the call, existing ones are bound read-only, the exit check reverts.\ndescription: Default profile plus Claude Code\'s state and cache (not its settings, hooks, commands, plugins or executables), and HTTPS to its own hosts.\nextends: default\nfilesystem:\n  read:\n    - ?~/.local/bin\n    - ?~/.nvm\n    - ?~/.npm-global\n    - ?~/.local/share/claude\n    - ?~/.config/claude\n  write:\n    - ?~/.cache/claude\n    - ?~/.cache/claude-cli-nodejs\n    - ?~/.local/state/claude\n  # ~/.claude.json is Claude Code\'s state, saved by a temporary file beside it renamed\n  # over it; it also holds MCP servers and per-project trust and tool permissions, which\n  # Claude Code obeys later as you. So the agent home gets a copy of its own (the save\n  # works there), written back at exit with these keys kept at their start values\n  # (docs/home-grants.md "Copied files"); a change to them is an alert.\n  copied:\n    - path: ?~/.claude.json\n      protected_keys:\n        - mcpServers                        # commands started by every later run\n        - projects.*.mcpServers\n        - projects.*.enabledMcpjsonServers  # a workdir\'s .mcp.json servers approved\n        - projects.*.enableAllProjectMcpServers\n        - projects.*.allowedTools           # tools run without asking\n        - projects.*.hasTrustDialogAccepted # a directory\'s settings and hooks trusted\n  state_roots:\n    - path: ?~/.claude\n      protected:\n        - /settings*.json       # hooks, statusLine, apiKeyHelper, permissions\n        - /hooks/\n        - /commands/\n        - /agents/\n        - /skills/\n        - /output-styles/\n        - /rules/\n        - /CLAUDE.md\n        - /local/               # a local install: Claude Code\'s own executables\n        # Plugins run from what their manifests name: the manifests and the code.\n        # plugins/store/ is the plugins\' data (a JSON file each, rewritten under a\n        # lock directory on every start): writable, as any other state.\n        - /plugins/*.json\n        - /plugins/cache/\n        - /plugins/marketplaces/\n        - /plugins/repos/\n        # scripts a person keeps beside the settings (statusLine, hook commands)\n        - /*.sh\n        - /*.py\n        - /*.js\n        - /*.mjs\n        - /bin/\n        - /scripts/\nnetwork:\n  # From Claude Code\'s network requirements (code.claude.com/docs/en/network-config)\n  # and its OAuth client. Shared services it can also use (sentry.io for error\n  # reports, Datadog) are not allowed: anyone can have an account there, so they\n  # would carry data to anyone.\n  allow:\n    - api.anthropic.com       # the model API (Messages), OAuth profile and roles, /bug\n    - console.anthropic.com   # OAuth token refresh for a Claude subscription login\n    - platform.claude.com     # the same for newer versions (the Console\'s new home)\n    - claude.ai               # WebFetch\'s domain safety check; claude.ai account login\n    - statsig.anthropic.com   # feature gates and metrics (Anthropic\'s own host): without it gated features are off\n# The API key stays outside: the agent holds a placeholder of the same shape, and\n# the egress gateway puts the real key into requests to the model API only\n# (docs/credentials.md). A Claude subscription login (~/.claude/.credentials.json)\n# is not affected: without ANTHROPIC_API_KEY set, this entry is skipped.\ncredentials:\n  - name: ANTHROPIC_API_KEY\n    from_env: ANTHROPIC_API_KEY\n    optional: true\n    hosts: [api.anthropic.com]\n    headers: [x-api-key]\n# A Claude subscription login: the agent reads a copy of the file with each token\n# replaced by a placeholder (the real file is never readable inside), and the\n# gateway puts the real access token into requests to the model API only, and\n# the refresh token into its refresh (docs/credentials.md, "Agent logins"). Shape: Claude Code\'s plaintext store\n# {"claudeAiOauth": {"accessToken", "refreshToken", "expiresAt", ...}}.\nlogins:\n  - name: claude-code\n    file: ~/.claude/.credentials.json\n    optional: true\n    tokens:\n      - {json: claudeAiOauth.accessToken, hosts: [api.anthropic.com]}\n      - {json: claudeAiOauth.refreshToken}     # only in the body of a refresh, below\n    # Its OAuth client\'s refresh (TOKEN_URL; console.anthropic.com in older versions): the\n    # real refresh token goes into the body, the new tokens come back as new placeholders\n    # and are written into the real file.\n    refresh:\n      endpoints: [platform.claude.com/v1/oauth/token, console.anthropic.com/v1/oauth/token]\n      token: claudeAiOauth.refreshToken\n      response: {access_token: claudeAiOauth.accessToken, refresh_token: claudeAiOauth.refreshToken}\n      # what it computes from the answer into its copy, computed again for the real file:\n      # without it the next run starts from an expired login (Date.now() + expires_in * 1000)\n      stamps: {claudeAiOauth.expiresAt: expires_in_ms}\nenv:\n  pass: [ANTHROPIC_BASE_URL, ANTHROPIC_MODEL, CLAUDE_CODE_USE_BEDROCK, CLAUDE_CONFIG_DIR, NO_COLOR]\n  set:\n    DISABLE_ERROR_REPORTING: "1"   # Sentry (sentry.io) is not allowed: do not try it\n    DISABLE_AUTOUPDATER: "1"       # its executables are read-only here; updates need other hosts\n',
    'codex': '# codex: the default profile plus what OpenAI Codex CLI needs.\n# Network: only the hosts below, on 443, through confine\'s gateway (DNS\n# included); --allow-host or network.include adds more.\n# ~/.codex is a state root (docs/profiles.md "Agent state"): Codex may make any name\n# in it (each release adds some: *_N.sqlite, installation_id, .tmp/, app-server-daemon/),\n# while the names below, which Codex runs or obeys later as you, stay protected like the\n# workdir\'s .git/hooks.\ndescription: Default profile plus Codex CLI\'s state in ~/.codex (not its config), and HTTPS to its own hosts.\nextends: default\nfilesystem:\n  read:\n    - ?~/.local/bin\n    - ?~/.nvm\n    - ?~/.npm-global\n  write:\n    - ?~/.cache/codex\n  state_roots:\n    - path: ?~/.codex\n      protected:\n        - /config.toml          # notify command, MCP servers, profiles, sandbox mode\n        - /*.config.toml\n        - /requirements.toml\n        - /managed_config.toml\n        - /AGENTS.md\n        - /AGENTS.override.md\n        - /prompts/\n        - /rules/\n        - /skills/\n        - /hooks.json\n        - /plugins/\n        - /*.sh\n        - /*.py\n        - /*.js\n        - /bin/\n        - /scripts/\n  # The one thing made before the start: its UI\'s app-server socket directory, so the\n  # unix_sockets grant below exists when the run starts (a grant needs an existing path).\n  state:\n    - ~/.codex/app-server-control/\n  # Its UI\'s app server keeps lock files in /tmp/codex-daemon-UID, a fixed place\n  # shared by every Codex of the account whatever TMPDIR says: the run gets a\n  # private one (the host\'s is never written; docs/profiles.md).\n  private_tmp:\n    - codex-daemon-{uid}\nunix_sockets:\n  allow:\n    - ?~/.codex/app-server-control\nnetwork:\n  # From Codex\'s authentication docs (developers.openai.com/codex/auth) and its\n  # login code (codex-rs: the OAuth issuer and the ChatGPT backend).\n  allow:\n    - api.openai.com    # the model API when signed in with an API key (OPENAI_API_KEY)\n    - chatgpt.com       # the model API when signed in with ChatGPT (chatgpt.com/backend-api/codex)\n    - auth.openai.com   # OAuth token refresh for a ChatGPT sign-in (log in outside the sandbox)\n    # Feature flags and experiments, tried at every start. OpenAI\'s own host under\n    # chatgpt.com, which is already reached: it carries the agent\'s data to no new\n    # party (as statsig.anthropic.com for claude-code); refused, Codex runs on its\n    # defaults and every run says so.\n    - ab.chatgpt.com     # feature flags and experiments, tried at every start (see above)\n# The API key stays outside: the agent holds a placeholder of the same shape, and\n# the egress gateway puts the real key into requests to the model API only\n# (docs/credentials.md). Without OPENAI_API_KEY set, this entry is skipped.\ncredentials:\n  - name: OPENAI_API_KEY\n    from_env: OPENAI_API_KEY\n    optional: true\n    hosts: [api.openai.com]\n# A Codex sign-in (~/.codex/auth.json: {"OPENAI_API_KEY", "tokens": {"id_token",\n# "access_token", "refresh_token", "account_id"}, "last_refresh"}): the agent reads\n# a copy with placeholders, the gateway swaps them toward Codex\'s own hosts. The\n# JWTs keep their claims readable (Codex reads its plan and account from them);\n# their signatures are placeholders. With CODEX_HOME set elsewhere, this file is not it.\nlogins:\n  - name: codex\n    file: ~/.codex/auth.json\n    optional: true\n    tokens:\n      - {json: OPENAI_API_KEY, hosts: [api.openai.com]}\n      - {json: tokens.access_token, hosts: [chatgpt.com], jwt: true}\n      - {json: tokens.refresh_token}           # only in the body of a refresh, below\n      - {json: tokens.id_token, jwt: true}\n    refresh:                                   # its OAuth issuer\'s token endpoint\n      endpoints: [auth.openai.com/oauth/token]\n      token: tokens.refresh_token\n      response: {id_token: tokens.id_token, access_token: tokens.access_token,\n                 refresh_token: tokens.refresh_token}\n      # when it refreshed, which it sets in its copy: the real file gets it too, or every\n      # later run would refresh again (Codex refreshes a login last refreshed days ago)\n      stamps: {last_refresh: now_rfc3339}\nenv:\n  pass: [OPENAI_BASE_URL, CODEX_HOME, CODEX_SQLITE_HOME, NO_COLOR]\n',
    'default': "# default: an agent that builds, tests and commits inside its workdir.\n# Writes: only {workdir} and the private {tmp} (both granted by confine itself).\n# Reads: system locations, nothing of $HOME but git's configuration.\n# Secrets (~/.ssh, ~/.aws, /etc/shadow, ...) are carved out of every grant by confine.\n# Network: none. Paths starting with '?' may be missing.\ndescription: Read the system, write the workdir and a private temp dir, no network, no secrets.\nfilesystem:\n  read:\n    - /usr\n    - ?/bin\n    - ?/sbin\n    - ?/lib\n    - ?/lib32\n    - ?/lib64\n    - ?/libx32\n    - ?/opt\n    - /etc\n    - /proc\n    - ?/sys/devices/system/cpu\n    - ?/sys/fs/cgroup\n    - ?/var/lib/dpkg\n    - ?/run/systemd/resolve\n    - ?~/.gitconfig\n    - ?~/.config/git/config\n    - ?~/.config/git/ignore\n    - ?~/.config/git/attributes\n  devices:\n    - /dev/null\n    - /dev/zero\n    - /dev/full\n    - /dev/random\n    - /dev/urandom\n    - ?/dev/tty\n    - ?/dev/pts\n    - ?/dev/ptmx\n  write:\n    # POSIX shared memory and semaphores (Python multiprocessing locks).\n    - ?/dev/shm\nnetwork:\n  connect_tcp: []\n  bind_tcp: []\nenv:\n  pass: []\nseccomp:\n  deny: []\n  unsafe_allow: []\nscope:\n  signals: true\n  abstract_unix: true\n# Resource limits (`unlimited` lifts one). A cgroup of the run where confine\n# can make one, rlimits otherwise: `confine exec --dry-run` says which applies.\nlimits:\n  processes: 4096        # tasks at once, threads included\n  memory: 8G             # without a cgroup: private memory per process (RLIMIT_DATA)\n  open_files: 8192       # per process\n  file_size: 16G         # the largest file the agent can write\n  tmp_size: 4G           # the private TMPDIR\n  shm_size: 1G           # the private /dev/shm\n",
    'strict': "# strict: nothing of $HOME, a minimal system, no network.\ndescription: Minimal system (binaries, libraries, a few /etc files), no $HOME at all, no network.\nfilesystem:\n  read:\n    - /usr\n    - ?/bin\n    - ?/sbin\n    - ?/lib\n    - ?/lib32\n    - ?/lib64\n    - ?/libx32\n    - ?/etc/ld.so.cache\n    - ?/etc/ld.so.conf\n    - ?/etc/ld.so.conf.d\n    - ?/etc/alternatives\n    - ?/etc/passwd\n    - ?/etc/group\n    - ?/etc/nsswitch.conf\n    - ?/etc/localtime\n    - ?/etc/ssl/certs\n    - ?/etc/ca-certificates.conf\n    - ?/etc/mime.types\n    - ?/etc/gitconfig\n    - ?/etc/bash.bashrc\n    - ?/etc/profile\n    - ?/etc/inputrc\n    - ?/etc/python3\n    - ?/etc/python3.11\n    - ?/etc/terminfo\n    # /proc as a whole: a rule on /proc/self would pin the launcher's own pid.\n    # Other processes' environ, mem and fds stay closed (Landlock ptrace rule).\n    - /proc\n    - ?/sys/devices/system/cpu\n  devices:\n    - /dev/null\n    - /dev/zero\n    - /dev/full\n    - /dev/random\n    - /dev/urandom\n    - ?/dev/tty\n    - ?/dev/pts\nlimits:                  # as the default profile (strict does not extend it)\n  processes: 4096\n  memory: 8G\n  open_files: 8192\n  file_size: 16G\n  tmp_size: 4G\n  shm_size: 1G\n",
}


def _claude_code(Item: Callable[[object, str], Any]) -> dict[str, Any]:
    return {
        'description': Item("Default profile plus Claude Code's state and cache (not its settings, hooks, commands, plugins or executables), and HTTPS to its own hosts.", 'claude-code.yaml:9'),
        'extends': Item('default', 'claude-code.yaml:10'),
        'filesystem': {
            'read': [
                Item('?~/.local/bin', 'claude-code.yaml:13'),
                Item('?~/.nvm', 'claude-code.yaml:14'),
                Item('?~/.npm-global', 'claude-code.yaml:15'),
                Item('?~/.local/share/claude', 'claude-code.yaml:16'),
                Item('?~/.config/claude', 'claude-code.yaml:17'),
            ],
            'write': [
                Item('?~/.cache/claude', 'claude-code.yaml:19'),
                Item('?~/.cache/claude-cli-nodejs', 'claude-code.yaml:20'),
                Item('?~/.local/state/claude', 'claude-code.yaml:21'),
            ],
            'copied': [
                {
                    'path': Item('?~/.claude.json', 'claude-code.yaml:28'),
                    'protected_keys': [
                        Item('mcpServers', 'claude-code.yaml:30'),
                        Item('projects.*.mcpServers', 'claude-code.yaml:31'),
                        Item('projects.*.enabledMcpjsonServers', 'claude-code.yaml:32'),
                        Item('projects.*.enableAllProjectMcpServers', 'claude-code.yaml:33'),
                        Item('projects.*.allowedTools', 'claude-code.yaml:34'),
                        Item('projects.*.hasTrustDialogAccepted', 'claude-code.yaml:35'),
                    ],
                },
            ],
            'state_roots': [
                {
                    'path': Item('?~/.claude', 'claude-code.yaml:37'),
                    'protected': [
                        Item('/settings*.json', 'claude-code.yaml:39'),
                        Item('/hooks/', 'claude-code.yaml:40'),
                        Item('/commands/', 'claude-code.yaml:41'),
                        Item('/agents/', 'claude-code.yaml:42'),
                        Item('/skills/', 'claude-code.yaml:43'),
                        Item('/output-styles/', 'claude-code.yaml:44'),
                        Item('/rules/', 'claude-code.yaml:45'),
                        Item('/CLAUDE.md', 'claude-code.yaml:46'),
                        Item('/local/', 'claude-code.yaml:47'),
                        Item('/plugins/*.json', 'claude-code.yaml:51'),
                        Item('/plugins/cache/', 'claude-code.yaml:52'),
                        Item('/plugins/marketplaces/', 'claude-code.yaml:53'),
                        Item('/plugins/repos/', 'claude-code.yaml:54'),
                        Item('/*.sh', 'claude-code.yaml:56'),
                        Item('/*.py', 'claude-code.yaml:57'),
                        Item('/*.js', 'claude-code.yaml:58'),
                        Item('/*.mjs', 'claude-code.yaml:59'),
                        Item('/bin/', 'claude-code.yaml:60'),
                        Item('/scripts/', 'claude-code.yaml:61'),
                    ],
                },
            ],
        },
        'network': {
            'allow': [
                Item('api.anthropic.com', 'claude-code.yaml:68'),
                Item('console.anthropic.com', 'claude-code.yaml:69'),
                Item('platform.claude.com', 'claude-code.yaml:70'),
                Item('claude.ai', 'claude-code.yaml:71'),
                Item('statsig.anthropic.com', 'claude-code.yaml:72'),
            ],
        },
        'credentials': [
            {
                'name': Item('ANTHROPIC_API_KEY', 'claude-code.yaml:78'),
                'from_env': Item('ANTHROPIC_API_KEY', 'claude-code.yaml:79'),
                'hosts': [
                    Item('api.anthropic.com', 'claude-code.yaml:81'),
                ],
                'headers': [
                    Item('x-api-key', 'claude-code.yaml:82'),
                ],
                'optional': Item(True, 'claude-code.yaml:80'),
            },
        ],
        'logins': [
            {
                'name': Item('claude-code', 'claude-code.yaml:89'),
                'file': Item('~/.claude/.credentials.json', 'claude-code.yaml:90'),
                'optional': Item(True, 'claude-code.yaml:91'),
                'tokens': [
                    {
                        'json': Item('claudeAiOauth.accessToken', 'claude-code.yaml:93'),
                        'hosts': [
                            Item('api.anthropic.com', 'claude-code.yaml:93'),
                        ],
                    },
                    {
                        'json': Item('claudeAiOauth.refreshToken', 'claude-code.yaml:94'),
                    },
                ],
                'refresh': {
                    'endpoints': [
                        Item('platform.claude.com/v1/oauth/token', 'claude-code.yaml:99'),
                        Item('console.anthropic.com/v1/oauth/token', 'claude-code.yaml:99'),
                    ],
                    'token': Item('claudeAiOauth.refreshToken', 'claude-code.yaml:100'),
                    'response': {
                        'access_token': Item('claudeAiOauth.accessToken', 'claude-code.yaml:101'),
                        'refresh_token': Item('claudeAiOauth.refreshToken', 'claude-code.yaml:101'),
                    },
                    'stamps': {
                        'claudeAiOauth.expiresAt': Item('expires_in_ms', 'claude-code.yaml:104'),
                    },
                },
            },
        ],
        'env': {
            'pass': [
                Item('ANTHROPIC_BASE_URL', 'claude-code.yaml:106'),
                Item('ANTHROPIC_MODEL', 'claude-code.yaml:106'),
                Item('CLAUDE_CODE_USE_BEDROCK', 'claude-code.yaml:106'),
                Item('CLAUDE_CONFIG_DIR', 'claude-code.yaml:106'),
                Item('NO_COLOR', 'claude-code.yaml:106'),
            ],
            'set': {
                'DISABLE_ERROR_REPORTING': Item('1', 'claude-code.yaml:108'),
                'DISABLE_AUTOUPDATER': Item('1', 'claude-code.yaml:109'),
            },
        },
    }


def _codex(Item: Callable[[object, str], Any]) -> dict[str, Any]:
    return {
        'description': Item("Default profile plus Codex CLI's state in ~/.codex (not its config), and HTTPS to its own hosts.", 'codex.yaml:8'),
        'extends': Item('default', 'codex.yaml:9'),
        'filesystem': {
            'read': [
                Item('?~/.local/bin', 'codex.yaml:12'),
                Item('?~/.nvm', 'codex.yaml:13'),
                Item('?~/.npm-global', 'codex.yaml:14'),
            ],
            'write': [
                Item('?~/.cache/codex', 'codex.yaml:16'),
            ],
            'state_roots': [
                {
                    'path': Item('?~/.codex', 'codex.yaml:18'),
                    'protected': [
                        Item('/config.toml', 'codex.yaml:20'),
                        Item('/*.config.toml', 'codex.yaml:21'),
                        Item('/requirements.toml', 'codex.yaml:22'),
                        Item('/managed_config.toml', 'codex.yaml:23'),
                        Item('/AGENTS.md', 'codex.yaml:24'),
                        Item('/AGENTS.override.md', 'codex.yaml:25'),
                        Item('/prompts/', 'codex.yaml:26'),
                        Item('/rules/', 'codex.yaml:27'),
                        Item('/skills/', 'codex.yaml:28'),
                        Item('/hooks.json', 'codex.yaml:29'),
                        Item('/plugins/', 'codex.yaml:30'),
                        Item('/*.sh', 'codex.yaml:31'),
                        Item('/*.py', 'codex.yaml:32'),
                        Item('/*.js', 'codex.yaml:33'),
                        Item('/bin/', 'codex.yaml:34'),
                        Item('/scripts/', 'codex.yaml:35'),
                    ],
                },
            ],
            'state': [
                Item('~/.codex/app-server-control/', 'codex.yaml:39'),
            ],
            'private_tmp': [
                Item('codex-daemon-{uid}', 'codex.yaml:44'),
            ],
        },
        'unix_sockets': {
            'allow': [
                Item('?~/.codex/app-server-control', 'codex.yaml:47'),
            ],
        },
        'network': {
            'allow': [
                Item('api.openai.com', 'codex.yaml:52'),
                Item('chatgpt.com', 'codex.yaml:53'),
                Item('auth.openai.com', 'codex.yaml:54'),
                Item('ab.chatgpt.com', 'codex.yaml:59'),
            ],
        },
        'credentials': [
            {
                'name': Item('OPENAI_API_KEY', 'codex.yaml:64'),
                'from_env': Item('OPENAI_API_KEY', 'codex.yaml:65'),
                'hosts': [
                    Item('api.openai.com', 'codex.yaml:67'),
                ],
                'optional': Item(True, 'codex.yaml:66'),
            },
        ],
        'logins': [
            {
                'name': Item('codex', 'codex.yaml:74'),
                'file': Item('~/.codex/auth.json', 'codex.yaml:75'),
                'optional': Item(True, 'codex.yaml:76'),
                'tokens': [
                    {
                        'json': Item('OPENAI_API_KEY', 'codex.yaml:78'),
                        'hosts': [
                            Item('api.openai.com', 'codex.yaml:78'),
                        ],
                    },
                    {
                        'json': Item('tokens.access_token', 'codex.yaml:79'),
                        'hosts': [
                            Item('chatgpt.com', 'codex.yaml:79'),
                        ],
                        'jwt': Item(True, 'codex.yaml:79'),
                    },
                    {
                        'json': Item('tokens.refresh_token', 'codex.yaml:80'),
                    },
                    {
                        'json': Item('tokens.id_token', 'codex.yaml:81'),
                        'jwt': Item(True, 'codex.yaml:81'),
                    },
                ],
                'refresh': {
                    'endpoints': [
                        Item('auth.openai.com/oauth/token', 'codex.yaml:83'),
                    ],
                    'token': Item('tokens.refresh_token', 'codex.yaml:84'),
                    'response': {
                        'id_token': Item('tokens.id_token', 'codex.yaml:85'),
                        'access_token': Item('tokens.access_token', 'codex.yaml:85'),
                        'refresh_token': Item('tokens.refresh_token', 'codex.yaml:86'),
                    },
                    'stamps': {
                        'last_refresh': Item('now_rfc3339', 'codex.yaml:89'),
                    },
                },
            },
        ],
        'env': {
            'pass': [
                Item('OPENAI_BASE_URL', 'codex.yaml:91'),
                Item('CODEX_HOME', 'codex.yaml:91'),
                Item('CODEX_SQLITE_HOME', 'codex.yaml:91'),
                Item('NO_COLOR', 'codex.yaml:91'),
            ],
        },
    }


def _default(Item: Callable[[object, str], Any]) -> dict[str, Any]:
    return {
        'description': Item('Read the system, write the workdir and a private temp dir, no network, no secrets.', 'default.yaml:6'),
        'filesystem': {
            'read': [
                Item('/usr', 'default.yaml:9'),
                Item('?/bin', 'default.yaml:10'),
                Item('?/sbin', 'default.yaml:11'),
                Item('?/lib', 'default.yaml:12'),
                Item('?/lib32', 'default.yaml:13'),
                Item('?/lib64', 'default.yaml:14'),
                Item('?/libx32', 'default.yaml:15'),
                Item('?/opt', 'default.yaml:16'),
                Item('/etc', 'default.yaml:17'),
                Item('/proc', 'default.yaml:18'),
                Item('?/sys/devices/system/cpu', 'default.yaml:19'),
                Item('?/sys/fs/cgroup', 'default.yaml:20'),
                Item('?/var/lib/dpkg', 'default.yaml:21'),
                Item('?/run/systemd/resolve', 'default.yaml:22'),
                Item('?~/.gitconfig', 'default.yaml:23'),
                Item('?~/.config/git/config', 'default.yaml:24'),
                Item('?~/.config/git/ignore', 'default.yaml:25'),
                Item('?~/.config/git/attributes', 'default.yaml:26'),
            ],
            'devices': [
                Item('/dev/null', 'default.yaml:28'),
                Item('/dev/zero', 'default.yaml:29'),
                Item('/dev/full', 'default.yaml:30'),
                Item('/dev/random', 'default.yaml:31'),
                Item('/dev/urandom', 'default.yaml:32'),
                Item('?/dev/tty', 'default.yaml:33'),
                Item('?/dev/pts', 'default.yaml:34'),
                Item('?/dev/ptmx', 'default.yaml:35'),
            ],
            'write': [
                Item('?/dev/shm', 'default.yaml:38'),
            ],
        },
        'network': {
            'connect_tcp': [],
            'bind_tcp': [],
        },
        'env': {
            'pass': [],
        },
        'seccomp': {
            'deny': [],
            'unsafe_allow': [],
        },
        'scope': {
            'signals': Item(True, 'default.yaml:48'),
            'abstract_unix': Item(True, 'default.yaml:49'),
        },
        'limits': {
            'processes': Item(4096, 'default.yaml:53'),
            'memory': Item(8589934592, 'default.yaml:54'),
            'open_files': Item(8192, 'default.yaml:55'),
            'file_size': Item(17179869184, 'default.yaml:56'),
            'tmp_size': Item(4294967296, 'default.yaml:57'),
            'shm_size': Item(1073741824, 'default.yaml:58'),
        },
    }


def _strict(Item: Callable[[object, str], Any]) -> dict[str, Any]:
    return {
        'description': Item('Minimal system (binaries, libraries, a few /etc files), no $HOME at all, no network.', 'strict.yaml:2'),
        'filesystem': {
            'read': [
                Item('/usr', 'strict.yaml:5'),
                Item('?/bin', 'strict.yaml:6'),
                Item('?/sbin', 'strict.yaml:7'),
                Item('?/lib', 'strict.yaml:8'),
                Item('?/lib32', 'strict.yaml:9'),
                Item('?/lib64', 'strict.yaml:10'),
                Item('?/libx32', 'strict.yaml:11'),
                Item('?/etc/ld.so.cache', 'strict.yaml:12'),
                Item('?/etc/ld.so.conf', 'strict.yaml:13'),
                Item('?/etc/ld.so.conf.d', 'strict.yaml:14'),
                Item('?/etc/alternatives', 'strict.yaml:15'),
                Item('?/etc/passwd', 'strict.yaml:16'),
                Item('?/etc/group', 'strict.yaml:17'),
                Item('?/etc/nsswitch.conf', 'strict.yaml:18'),
                Item('?/etc/localtime', 'strict.yaml:19'),
                Item('?/etc/ssl/certs', 'strict.yaml:20'),
                Item('?/etc/ca-certificates.conf', 'strict.yaml:21'),
                Item('?/etc/mime.types', 'strict.yaml:22'),
                Item('?/etc/gitconfig', 'strict.yaml:23'),
                Item('?/etc/bash.bashrc', 'strict.yaml:24'),
                Item('?/etc/profile', 'strict.yaml:25'),
                Item('?/etc/inputrc', 'strict.yaml:26'),
                Item('?/etc/python3', 'strict.yaml:27'),
                Item('?/etc/python3.11', 'strict.yaml:28'),
                Item('?/etc/terminfo', 'strict.yaml:29'),
                Item('/proc', 'strict.yaml:32'),
                Item('?/sys/devices/system/cpu', 'strict.yaml:33'),
            ],
            'devices': [
                Item('/dev/null', 'strict.yaml:35'),
                Item('/dev/zero', 'strict.yaml:36'),
                Item('/dev/full', 'strict.yaml:37'),
                Item('/dev/random', 'strict.yaml:38'),
                Item('/dev/urandom', 'strict.yaml:39'),
                Item('?/dev/tty', 'strict.yaml:40'),
                Item('?/dev/pts', 'strict.yaml:41'),
            ],
        },
        'limits': {
            'processes': Item(4096, 'strict.yaml:43'),
            'memory': Item(8589934592, 'strict.yaml:44'),
            'open_files': Item(8192, 'strict.yaml:45'),
            'file_size': Item(17179869184, 'strict.yaml:46'),
            'tmp_size': Item(4294967296, 'strict.yaml:47'),
            'shm_size': Item(1073741824, 'strict.yaml:48'),
        },
    }


BUILD: dict[str, Callable[[Callable[[object, str], Any]], dict[str, Any]]] = {
    'claude-code': _claude_code,
    'codex': _codex,
    'default': _default,
    'strict': _strict,
}
