"""ansible-runner's two controller halves, as AWX calls them, run by the lab's virtualenv's python.

``runner_stream.py transmit KWARGS_JSON PAYLOAD``: ``ansible_runner.run(streamer='transmit', **kwargs)`` writes the job
(private data dir, settings, container options) to PAYLOAD: what AWX hands to ``receptorctl work submit``.
``runner_stream.py process PRIVATE_DATA_DIR RESULTS``: ``ansible_runner.run(streamer='process')`` reads the worker's
stream from RESULTS, writes the events and artifacts into PRIVATE_DATA_DIR and prints {"status", "rc"} as JSON.
"""

import json
import sys

import ansible_runner  # pylint: disable=import-error


def main(argv):
    if argv[1] == 'transmit':
        with open(argv[2], encoding='utf-8') as handle:
            kwargs = json.load(handle)
        with open(argv[3], 'wb') as out:
            ansible_runner.run(streamer='transmit', _output=out, **kwargs)
        return 0
    if argv[1] == 'process':
        with open(argv[3], 'rb') as stream:
            result = ansible_runner.run(streamer='process', _input=stream, private_data_dir=argv[2], quiet=True)
        print(json.dumps({'status': result.status, 'rc': result.rc}))
        return 0
    sys.stderr.write('usage: runner_stream.py transmit KWARGS_JSON PAYLOAD | process PRIVATE_DATA_DIR RESULTS\n')
    return 2


if __name__ == '__main__':
    sys.exit(main(sys.argv))
