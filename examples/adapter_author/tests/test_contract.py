import pytest
from my_store import AuditedJobRepository
from tether.adapters.memory import InMemoryJobRepository
from tether.testing import RepositoryContract, RepositoryStateMachine


class TestAuditedJobRepository(RepositoryContract):  # every contract test, on your adapter
    @pytest.fixture
    def repository(self, clock):
        repository = AuditedJobRepository(InMemoryJobRepository())
        yield repository
        repository.close()


class AuditedMachine(RepositoryStateMachine):  # random histories checked against the model
    def make_repository(self):
        return AuditedJobRepository(InMemoryJobRepository())


TestAuditedMachine = AuditedMachine.test_case()
