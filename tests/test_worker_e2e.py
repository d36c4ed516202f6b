import pytest


@pytest.mark.slow
def test_smoke(worker, client, agent_id):
    r = client.store(agent_id, "hello world")
    print(r)
    print(client.recall(agent_id, "hello"))
