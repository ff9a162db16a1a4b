"""ansible-runner's two controller halves, as AWX calls them, run by the lab's virtualenv's python.

``runner_stream.py transmit KWARGS_JSON PAYLOAD``: ``ansible_runner.run(streamer='transmit', **kwargs)`` writes the job
(private data dir, settings, container options) to PAYLOAD: what AWX hands to ``receptorctl work submit``.
``runner_stream.py process PRIVATE_DATA_DIR IDENT RESULTS``: ``ansible_runner.run(streamer='process')`` reads the
worker's stream from RESULTS, writes the events and artifacts into PRIVATE_DATA_DIR/artifacts/IDENT and prints
{"status", "rc", "explanation"} as JSON (rc from the job's artifacts, as the worker sent them back).
"""

import json
import os
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
        statuses = []
        with open(argv[4], 'rb') as stream:
            result = ansible_runner.run(streamer='process', _input=stream, private_data_dir=argv[2], ident=argv[3], quiet=True,
                                        status_handler=lambda data, runner_config=None: statuses.append(data))
        rc = None
        try:
            with open(os.path.join(argv[2], 'artifacts', argv[3], 'rc'), encoding='utf-8') as handle:
                rc = int(handle.read().strip())
        except (OSError, ValueError):
            pass
        print(json.dumps({'status': result.status, 'rc': rc,
                          'explanation': next((data.get('job_explanation') for data in reversed(statuses)
                                               if data.get('job_explanation')), None)}))
        return 0
    sys.stderr.write('usage: runner_stream.py transmit KWARGS_JSON PAYLOAD | process PRIVATE_DATA_DIR IDENT RESULTS\n')
    return 2


if __name__ == '__main__':
    sys.exit(main(sys.argv))
