"""kube-aws-node: the program kube-aws ships to every node (/opt/kube-aws/lib).

Invariant: Python 3.9 standard library only (Amazon Linux 2023's system
python3), one job per module; every value reaches it as data (JSON files,
IMDS, AWS answers) and leaves it as subprocess argument lists, never as shell
code. `kube-aws-node COMMAND` dispatches through cli.py.
"""
